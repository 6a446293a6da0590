"""Memory placement as the runtime sees it: a claimed container whose claim is placed gets
`linux.resources.cpu.mems` in its CreateContainer adjustment, and again in every Synchronize
(runtime restart, plugin restart); shared containers and unplaced claims never get mems, so
they keep every memory node; a claim holding node memory gets its node as mems and its
hugepages as hugetlb limits. The machine is single-4c8t: one NUMA node, node 0, whose memory
is published as memory-node-0 (8 GiB, 64 pages of 2 MiB and one of 1 GiB)."""

from __future__ import annotations

from pathlib import Path

import pytest
from harness.nri_bed import ONLINE, Bed, claim_env, new_plugin, prepare_seen, stop_tasks
from harness.waits import eventually

from dracpu.core.cpuset import CPUSet
from dracpu.core.errors import ConflictError, InsufficientCPUsError
from dracpu.core.rpc import call, channel
from dracpu.nri_plugin.transport.compat import UnsolicitedMode
from dracpu.pb.allocator.v1 import allocator_pb2, allocator_pb2_grpc


async def prepare_placed(bed: Bed, count: int, placement: str) -> tuple[str, CPUSet]:
    uid, cpus = await bed.allocator.prepare(count, memory_placement=placement)
    pool = await bed.allocator.shared()
    await eventually(lambda: bed.plugin.shared_pool == pool, "plugin to see the pool", timeout=10)
    return uid, cpus


async def test_a_placed_claim_adjusts_mems_and_shared_containers_keep_every_node(
    bed: Bed,
) -> None:
    web = bed.runtime.add_pod("web")
    shared = await bed.runtime.create_container(web, "nginx")
    uid, cpus = await prepare_placed(bed, 2, "local")
    assert (await bed.allocator.claim(uid)).memory_nodes == "0"
    db = bed.runtime.add_pod("db")
    pinned = await bed.runtime.create_container(db, "postgres", claim_env((uid, cpus)))
    assert CPUSet.parse(bed.runtime.cpus(pinned)) == cpus
    assert bed.runtime.mems(pinned) == "0"
    # The same response moved the shared container off the claim's CPUs, mems untouched.
    assert CPUSet.parse(bed.runtime.cpus(shared)) == ONLINE - cpus
    assert bed.runtime.mems(shared) == ""
    late = await bed.runtime.create_container(web, "late")
    assert bed.runtime.mems(late) == ""
    assert bed.plugin.registry.get(pinned).mems == CPUSet.parse("0")  # type: ignore[union-attr]


async def test_an_unplaced_claim_leaves_mems_alone(bed: Bed) -> None:
    for placement in ("none", ""):
        uid, cpus = await prepare_placed(bed, 1, placement)
        assert (await bed.allocator.claim(uid)).memory_nodes == ""
        pod = bed.runtime.add_pod(f"p-{placement or 'default'}")
        cid = await bed.runtime.create_container(pod, "app", claim_env((uid, cpus)))
        assert CPUSet.parse(bed.runtime.cpus(cid)) == cpus and bed.runtime.mems(cid) == ""


async def test_two_claims_get_the_union(bed: Bed) -> None:
    first = await prepare_placed(bed, 1, "local")
    second = await prepare_seen(bed, 1)
    pod = bed.runtime.add_pod("multi")
    cid = await bed.runtime.create_container(pod, "app", claim_env(first, second))
    assert bed.runtime.mems(cid) == "0"


async def test_synchronize_reapplies_mems_after_a_runtime_restart(bed: Bed) -> None:
    uid, cpus = await prepare_placed(bed, 2, "local")
    db = bed.runtime.add_pod("db")
    web = bed.runtime.add_pod("web")
    pinned = await bed.runtime.create_container(db, "postgres", claim_env((uid, cpus)))
    shared = await bed.runtime.create_container(web, "nginx")
    # Lost behind the plugin's back (a runtime that forgot the adjustment).
    bed.runtime.containers[pinned].linux.resources.cpu.mems = ""
    connects = bed.stub.status.connects
    await bed.runtime.restart()
    await eventually(lambda: bed.stub.status.connects > connects, "reconnect", timeout=10)
    await bed.runtime.wait_plugin()
    assert bed.runtime.mems(pinned) == "0" and CPUSet.parse(bed.runtime.cpus(pinned)) == cpus
    assert bed.runtime.mems(shared) == ""


async def test_a_restarted_plugin_learns_mems_from_the_allocator(bed: Bed) -> None:
    """The registry is rebuilt from the runtime (Adopt answers the container's mems)."""
    uid, cpus = await prepare_placed(bed, 2, "local")
    db = bed.runtime.add_pod("db")
    pinned = await bed.runtime.create_container(db, "postgres", claim_env((uid, cpus)))
    await stop_tasks(bed.stub, bed.tasks)
    bed.runtime.containers[pinned].linux.resources.cpu.mems = ""
    plugin, stub, client, tasks = new_plugin(
        bed.allocator, Path(bed.runtime.socket_path), UnsolicitedMode.AUTO
    )
    try:
        await eventually(lambda: plugin.registry.get(pinned) is not None, "resync", timeout=10)
        assert plugin.registry.get(pinned).mems == CPUSet.parse("0")  # type: ignore[union-attr]
        await eventually(lambda: bed.runtime.mems(pinned) == "0", "mems re-applied", timeout=10)
    finally:
        await stop_tasks(stub, tasks)
        await client.close()


async def test_a_claim_holding_memory_gets_its_node_and_hugepage_limits(bed: Bed) -> None:
    memory = {
        "dra.cpu/memory": "1Gi",
        "dra.cpu/hugepages2Mi": "32Mi",
        "dra.cpu/hugepages1Gi": "1Gi",
    }
    uid, cpus = await bed.allocator.prepare(2, memory=memory)
    pod = bed.runtime.add_pod("db")
    pinned = await bed.runtime.create_container(pod, "postgres", claim_env((uid, cpus)))
    assert CPUSet.parse(bed.runtime.cpus(pinned)) == cpus
    assert bed.runtime.mems(pinned) == "0"
    assert bed.runtime.hugepage_limits(pinned) == {"2MB": 32 << 20, "1GB": 1 << 30}
    # A claim without memory sets no limit.
    plain, plain_cpus = await prepare_seen(bed, 1)
    other = await bed.runtime.create_container(pod, "app", claim_env((plain, plain_cpus)))
    assert bed.runtime.hugepage_limits(other) == {} and bed.runtime.mems(other) == ""


async def test_more_hugepages_than_the_pool_has_left_fail_the_prepare(bed: Bed) -> None:
    await bed.allocator.prepare(1, memory={"dra.cpu/hugepages2Mi": "96Mi"})
    with pytest.raises(InsufficientCPUsError) as refused:
        await bed.allocator.prepare(1, memory={"dra.cpu/hugepages2Mi": "64Mi"})
    assert str(refused.value).endswith("NUMA node 0 hugepages-2Mi: wants 64Mi, 32Mi free")
    # The allocator keeps serving, and the refused claim took no CPUs.
    assert len(await bed.allocator.shared()) == len(ONLINE) - 1


async def test_an_older_plugin_is_refused_the_container_of_a_memory_claim(bed: Bed) -> None:
    """An nri-plugin that does not say it enforces memory (one release behind) cannot pin
    a memory claim's container half-way: the allocator refuses the attach."""
    uid, cpus = await bed.allocator.prepare(2, memory={"dra.cpu/hugepages2Mi": "2Mi"})
    older = allocator_pb2.AttachContainerRequest(
        container=allocator_pb2.ContainerRef(
            container_id="c-old", pod_uid="pod-old", container_name="app", pod_namespace="default"
        ),
        claims={uid: cpus.format()},
    )
    async with channel(bed.allocator.socket) as chan:
        stub = allocator_pb2_grpc.AllocatorStub(chan)
        with pytest.raises(ConflictError) as refused:
            await call(stub.AttachContainer(older, timeout=5), "attach")
    assert str(refused.value).endswith(
        f"claim {uid} holds NUMA node memory, which this nri-plugin does not enforce; "
        "upgrade the nri-plugin"
    )
    assert not (await bed.allocator.claim(uid)).HasField("owner")
