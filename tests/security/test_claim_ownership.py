"""Claim ownership: a container's DRA_CPUSET env names a claim, but only the claim's namespace
and status.reservedFor pods decide whether its container may use it; a claim the allocator has
no record of never becomes one from the env alone; unpreparing a claim whose container still
runs does not hand its CPUs to shared containers. Driven through the runtime stand-in over the
real NRI transport, with the real allocator process deciding."""

from __future__ import annotations

import uuid

import pytest
from harness.nri_bed import ONLINE, Bed, claim_env
from harness.requests import prepare_request
from harness.waits import eventually

from dracpu.core.cpuset import CPUSet
from dracpu.core.rpc import call, channel
from dracpu.dev.runtime_sim import CreateContainerError
from dracpu.pb.allocator.v1 import allocator_pb2_grpc

pytestmark = pytest.mark.security


async def prepare(
    bed: Bed,
    count: int,
    *,
    namespace: str = "t",
    pods: tuple[str, ...] | None = (),
    uid: str = "",
) -> tuple[str, CPUSet]:
    """Prepare as the dra-plugin does; pods=None is an older dra-plugin (no reservedFor)."""
    uid = uid or str(uuid.uuid4())
    request = prepare_request(uid, count, namespace=namespace, pods=pods)
    async with channel(bed.allocator.socket) as chan:
        stub = allocator_pb2_grpc.AllocatorStub(chan)
        reply = await call(stub.Prepare(request, timeout=5), f"prepare {uid}")
    pool = await bed.allocator.shared()
    await eventually(lambda: bed.plugin.shared_pool == pool, "plugin to see the pool", timeout=10)
    return uid, CPUSet.parse(reply.claim.cpus)


def pod_uid(bed: Bed, pod_id: str) -> str:
    return bed.runtime.pods[pod_id].uid


async def test_a_pod_of_another_namespace_cannot_take_the_claim(bed: Bed) -> None:
    owner = bed.runtime.add_pod("p-owner", namespace="t")
    uid, cpus = await prepare(bed, 2, pods=(pod_uid(bed, owner),))
    hijacker = bed.runtime.add_pod("p-hijacker", namespace="ns")
    with pytest.raises(CreateContainerError, match="namespace"):
        await bed.runtime.create_container(hijacker, "app", claim_env((uid, cpus)))
    legit = await bed.runtime.create_container(owner, "app", claim_env((uid, cpus)))
    assert CPUSet.parse(bed.runtime.cpus(legit)) == cpus
    assert (await bed.allocator.claim(uid)).owner.container_id == legit


async def test_a_pod_the_claim_is_not_reserved_for_cannot_take_it(bed: Bed) -> None:
    owner = bed.runtime.add_pod("p-owner", namespace="t")
    uid, cpus = await prepare(bed, 2, pods=(pod_uid(bed, owner),))
    neighbour = bed.runtime.add_pod("p-neighbour", namespace="t")
    with pytest.raises(CreateContainerError, match="reserved for pods"):
        await bed.runtime.create_container(neighbour, "app", claim_env((uid, cpus)))
    assert (await bed.allocator.claim(uid)).owner.container_id == ""
    legit = await bed.runtime.create_container(owner, "app", claim_env((uid, cpus)))
    assert CPUSet.parse(bed.runtime.cpus(legit)) == cpus


async def test_an_older_dra_plugin_binds_the_first_container_of_the_namespace(bed: Bed) -> None:
    # A dra-plugin that does not pass reservedFor: the namespace is still checked, and the
    # first container of it that attaches owns the claim (the allocator logs a warning).
    uid, cpus = await prepare(bed, 2, pods=None)
    stranger = bed.runtime.add_pod("p-x", namespace="elsewhere")
    with pytest.raises(CreateContainerError, match="namespace"):
        await bed.runtime.create_container(stranger, "app", claim_env((uid, cpus)))
    first = bed.runtime.add_pod("p-first", namespace="t")
    cid = await bed.runtime.create_container(first, "app", claim_env((uid, cpus)))
    assert CPUSet.parse(bed.runtime.cpus(cid)) == cpus
    log = (bed.allocator.root / "allocator.log").read_text()
    assert "older dra-plugin" in log


async def test_a_forged_claim_in_the_env_is_quarantined_at_resync(bed: Bed) -> None:
    # A container that started while the plugin was away carries a made-up claim covering
    # every CPU. Before, it became a "recovered" claim and emptied the shared pool.
    connects = bed.stub.status.connects
    await bed.runtime.stop()
    pod = bed.runtime.add_pod("p-forger", namespace="ns")
    forged = await bed.runtime.create_container(
        pod, "app", claim_env(("made-up", ONLINE)), container_id="forged"
    )
    await bed.runtime.start()
    await eventually(lambda: bed.stub.status.connects > connects, "reconnect", timeout=10)
    await bed.runtime.wait_plugin()
    assert await bed.allocator.shared() == ONLINE
    assert not list((bed.allocator.root / "cdi").glob("*made-up*"))
    assert not list((bed.allocator.root / "state" / "claims").glob("made-up*"))
    web = bed.runtime.add_pod("web")
    shared = await bed.runtime.create_container(web, "nginx")
    assert CPUSet.parse(bed.runtime.cpus(shared)) == ONLINE
    assert CPUSet.parse(bed.runtime.cpus(forged)) == ONLINE  # left as it was, nothing taken
    log = (bed.allocator.root / "allocator.log").read_text()
    assert "quarantined" in log and "made-up" in log


async def test_a_forged_claim_does_not_keep_cpus_a_later_claim_takes(bed: Bed) -> None:
    # The made-up claim names CPUs of the pool: quarantine takes none of them, so the
    # container runs on the pool and follows it when a real claim takes those CPUs.
    connects = bed.stub.status.connects
    await bed.runtime.stop()
    pod = bed.runtime.add_pod("p-forger", namespace="ns")
    forged = await bed.runtime.create_container(
        pod, "app", claim_env(("made-up", CPUSet.parse("4-7"))), container_id="forged"
    )
    await bed.runtime.start()
    await eventually(lambda: bed.stub.status.connects > connects, "reconnect", timeout=10)
    await bed.runtime.wait_plugin()
    await eventually(
        lambda: CPUSet.parse(bed.runtime.cpus(forged)) == ONLINE,
        "forged on the pool",
        timeout=10,
    )
    owner = bed.runtime.add_pod("p-owner", namespace="t")
    uid, cpus = await prepare(bed, 4, pods=(pod_uid(bed, owner),))
    legit = await bed.runtime.create_container(owner, "app", claim_env((uid, cpus)))
    assert CPUSet.parse(bed.runtime.cpus(legit)) == cpus
    await eventually(
        lambda: CPUSet.parse(bed.runtime.cpus(forged)) == ONLINE - cpus,
        "the forged container to follow the pool",
        timeout=10,
    )
    record = bed.plugin.registry.get(forged)
    assert record is not None and not record.exclusive and record.quarantined == ("made-up",)


async def test_a_quarantined_claim_is_confirmed_by_its_prepare(bed: Bed) -> None:
    # A legitimate claim whose state was lost: the container keeps running where it was, and
    # the kubelet's prepare confirms the CPUs.
    connects = bed.stub.status.connects
    await bed.runtime.stop()
    pod = bed.runtime.add_pod("p-db", namespace="t")
    uid = str(uuid.uuid4())
    cid = await bed.runtime.create_container(pod, "db", claim_env((uid, CPUSet.parse("2-3"))))
    bed.runtime.containers[cid].linux.resources.cpu.cpus = "2-3"
    await bed.runtime.start()
    await eventually(lambda: bed.stub.status.connects > connects, "reconnect", timeout=10)
    await bed.runtime.wait_plugin()
    assert await bed.allocator.shared() == ONLINE
    _, cpus = await prepare(bed, 2, uid=uid, pods=(pod_uid(bed, pod),))
    assert cpus == CPUSet.parse("2-3")
    claim = await bed.allocator.claim(uid)
    assert claim.owner.container_id == cid and claim.owner.pod_uid == pod_uid(bed, pod)
    assert await bed.allocator.shared() == ONLINE - cpus


async def test_unprepare_while_the_container_runs_keeps_its_cpus_out_of_the_pool(
    bed: Bed,
) -> None:
    owner = bed.runtime.add_pod("p-owner", namespace="t")
    uid, cpus = await prepare(bed, 2, pods=(pod_uid(bed, owner),))
    pinned = await bed.runtime.create_container(owner, "app", claim_env((uid, cpus)))
    await bed.allocator.unprepare(uid)
    assert await bed.allocator.shared() == ONLINE - cpus
    web = bed.runtime.add_pod("web")
    shared = await bed.runtime.create_container(web, "nginx")
    assert not CPUSet.parse(bed.runtime.cpus(shared)) & cpus
    await bed.runtime.stop_container(pinned)
    await eventually(lambda: bed.plugin.shared_pool == ONLINE, "the CPUs to come back", timeout=10)
    await eventually(
        lambda: CPUSet.parse(bed.runtime.cpus(shared)) == ONLINE,
        "push of the pool",
        timeout=10,
    )


async def test_a_container_whose_claim_was_unprepared_keeps_its_cpus_across_a_resync(
    bed: Bed,
) -> None:
    # Found running at a resync, it is adopted on the CPUs held for it (not moved onto the
    # shared pool beside them); its stop still gives them back.
    owner = bed.runtime.add_pod("p-owner", namespace="t")
    uid, cpus = await prepare(bed, 2, pods=(pod_uid(bed, owner),))
    pinned = await bed.runtime.create_container(owner, "app", claim_env((uid, cpus)))
    await bed.allocator.unprepare(uid)
    connects = bed.stub.status.connects
    await bed.runtime.stop()
    await bed.runtime.start()
    await eventually(lambda: bed.stub.status.connects > connects, "reconnect", timeout=10)
    await bed.runtime.wait_plugin()
    assert CPUSet.parse(bed.runtime.cpus(pinned)) == cpus
    record = bed.plugin.registry.get(pinned)
    assert record is not None and record.exclusive
    assert await bed.allocator.shared() == ONLINE - cpus
    await bed.runtime.stop_container(pinned)
    await eventually(lambda: bed.plugin.shared_pool == ONLINE, "the CPUs to come back", timeout=10)
