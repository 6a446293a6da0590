"""What the runtime sees from the plugin, driven through the runtime stand-in over the real
transport, with the real allocator deciding the CPUs."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest
from harness.nri_bed import ONLINE, Bed, claim_env, prepare_seen, stop_process
from harness.waits import eventually

from dracpu.core.cpuset import CPUSet
from dracpu.dev.runtime_sim import CONTAINERD_2_0, CreateContainerError, RuntimeProfile
from dracpu.nri_plugin.transport.compat import UnsolicitedMode
from dracpu.nri_plugin.transport.stub import PLUGIN_SERVICE
from dracpu.pb.nri import api_pb2


async def test_shared_container_gets_the_shared_pool(bed: Bed) -> None:
    pod = bed.runtime.add_pod("web")
    cid = await bed.runtime.create_container(pod, "nginx", ["PATH=/bin"])
    assert CPUSet.parse(bed.runtime.cpus(cid)) == ONLINE == await bed.allocator.shared()
    [record] = list(bed.plugin.registry)
    assert (record.container_id, record.exclusive, record.cpus) == (cid, False, ONLINE)


async def test_claimed_container_is_pinned_and_shared_ones_shrink_in_the_same_response(
    bed: Bed,
) -> None:
    web = bed.runtime.add_pod("web")
    shared_ids = [await bed.runtime.create_container(web, f"c{i}") for i in range(3)]
    uid, cpus = await prepare_seen(bed, 2)
    pod = bed.runtime.add_pod("db")
    cid = await bed.runtime.create_container(pod, "postgres", claim_env((uid, cpus)))
    assert CPUSet.parse(bed.runtime.cpus(cid)) == cpus
    for sid in shared_ids:
        assert CPUSet.parse(bed.runtime.cpus(sid)) == ONLINE - cpus
    claim = await bed.allocator.claim(uid)
    assert claim.owner.container_id == cid


async def test_several_claims_pin_to_the_union(bed: Bed) -> None:
    first = await prepare_seen(bed, 2)
    second = await prepare_seen(bed, 2)
    pod = bed.runtime.add_pod("multi")
    cid = await bed.runtime.create_container(pod, "app", claim_env(first, second))
    assert CPUSet.parse(bed.runtime.cpus(cid)) == first[1] | second[1]
    [record] = list(bed.plugin.registry)
    assert record.claims == tuple(sorted([first[0], second[0]]))


REFUSALS = [
    pytest.param(lambda uid, cpus: [f"DRA_CPUSET_{uid}=zero-one"], "malformed", id="bad-list"),
    pytest.param(lambda uid, cpus: [f"DRA_CPUSET_{uid}"], "no '='", id="no-equals"),
    pytest.param(lambda uid, cpus: [f"DRA_CPUSET_{uid}="], "empty", id="empty-value"),
    pytest.param(
        lambda uid, cpus: ["DRA_CPUSET_0000dead-beef-4000-8000-000000000000=0-1"],
        "0000dead",
        id="unknown-claim",
    ),
    pytest.param(
        lambda uid, cpus: [f"DRA_CPUSET_{uid}={(ONLINE - cpus).first()}"],
        "prepared with",
        id="cpus-differ",
    ),
]


@pytest.mark.parametrize(("env", "needle"), REFUSALS)
async def test_bad_claim_env_refuses_the_container_and_changes_nothing(
    bed: Bed, env: object, needle: str
) -> None:
    uid, cpus = await prepare_seen(bed, 2)
    web = bed.runtime.add_pod("web")
    shared = await bed.runtime.create_container(web, "nginx")
    before_pool = await bed.allocator.shared()
    before = bed.runtime.cpusets()
    pod = bed.runtime.add_pod("bad")
    with pytest.raises(CreateContainerError) as refused:
        await bed.runtime.create_container(pod, "app", env(uid, cpus))  # type: ignore[operator]
    assert needle in str(refused.value)
    assert bed.runtime.cpusets() == before
    assert [r.container_id for r in bed.plugin.registry] == [shared]
    assert await bed.allocator.shared() == before_pool
    assert not (await bed.allocator.claim(uid)).owner.container_id


async def test_claim_owned_by_another_container_is_refused(bed: Bed) -> None:
    uid, cpus = await prepare_seen(bed, 2)
    first = bed.runtime.add_pod("one")
    await bed.runtime.create_container(first, "app", claim_env((uid, cpus)))
    second = bed.runtime.add_pod("two")
    with pytest.raises(CreateContainerError):
        await bed.runtime.create_container(second, "app", claim_env((uid, cpus)))
    assert len(bed.plugin.registry) == 1


async def test_stop_and_remove_forget_the_container_but_the_claim_keeps_its_cpus(
    bed: Bed,
) -> None:
    uid, cpus = await prepare_seen(bed, 2)
    pod = bed.runtime.add_pod("db")
    cid = await bed.runtime.create_container(pod, "postgres", claim_env((uid, cpus)))
    await bed.runtime.stop_container(cid)
    assert bed.plugin.registry.get(cid) is None
    await bed.runtime.remove_container(cid)
    assert await bed.allocator.shared() == ONLINE - cpus
    # The restarted container (same pod and name, new id) gets the same CPUs again.
    again = await bed.runtime.create_container(pod, "postgres", claim_env((uid, cpus)))
    assert CPUSet.parse(bed.runtime.cpus(again)) == cpus


@pytest.mark.parametrize(
    "profile",
    [
        pytest.param(RuntimeProfile(dedicated_remove=True), id="v0.12-RemoveContainer"),
        pytest.param(CONTAINERD_2_0, id="v0.8-StateChange"),
    ],
)
async def test_a_stop_the_allocator_missed_is_sent_again_so_the_claim_gives_its_cpus_back(
    bed: Bed,
) -> None:
    """The allocator is away (restarting, or too slow to answer in time) when a claimed
    container stops. The plugin sends the detach again until it lands; lost, the allocator
    would hold the container as running, and the claim, unprepared after it, would keep its
    CPUs out of the shared pool for good."""
    uid, cpus = await prepare_seen(bed, 2)
    pod = bed.runtime.add_pod("db")
    cid = await bed.runtime.create_container(pod, "postgres", claim_env((uid, cpus)))
    stop_process(bed.allocator.process)
    await bed.runtime.stop_container(cid)
    await bed.runtime.remove_container(cid)
    assert bed.plugin.detaches.pending == [cid]
    await bed.allocator.restart()
    await eventually(lambda: not bed.plugin.detaches.pending, "the detach sent again", timeout=10)
    assert not (await bed.allocator.claim(uid)).owner.container_id
    await bed.allocator.unprepare(uid)
    assert await bed.allocator.shared() == ONLINE


async def test_removal_arrives_either_way(bed: Bed) -> None:
    pod = bed.runtime.add_pod("web")
    cid = await bed.runtime.create_container(pod, "nginx")
    assert bed.plugin.registry.get(cid) is not None
    await bed.runtime.remove_container(cid)
    assert bed.plugin.registry.get(cid) is None


async def test_empty_shared_pool_refuses_shared_containers(bed: Bed) -> None:
    uid, cpus = await prepare_seen(bed, len(ONLINE))
    assert await bed.allocator.shared() == CPUSet()
    pod = bed.runtime.add_pod("web")
    await eventually(lambda: bed.plugin.shared_pool == CPUSet(), "pool to empty", timeout=10)
    with pytest.raises(CreateContainerError, match="shared pool is empty"):
        await bed.runtime.create_container(pod, "nginx")
    # A claimed container still starts.
    owner = bed.runtime.add_pod("all")
    cid = await bed.runtime.create_container(owner, "app", claim_env((uid, cpus)))
    assert CPUSet.parse(bed.runtime.cpus(cid)) == ONLINE


@pytest.mark.parametrize("unsolicited_mode", [UnsolicitedMode.AUTO])
async def test_pool_growth_is_pushed_in_batches_where_the_runtime_is_safe(bed: Bed) -> None:
    uid, cpus = await prepare_seen(bed, 2)
    web = bed.runtime.add_pod("web")
    ids = [await bed.runtime.create_container(web, f"c{i:03d}") for i in range(100)]
    assert {bed.runtime.cpus(i) for i in ids} == {(ONLINE - cpus).format()}
    before = len(bed.runtime.unsolicited)
    await bed.allocator.unprepare(uid)
    await eventually(
        lambda: {bed.runtime.cpus(i) for i in ids} == {ONLINE.format()},
        "pool push",
        timeout=10,
    )
    pushed = bed.runtime.unsolicited[before:]
    assert sum(len(b.updates) for b in pushed) >= 100
    assert max(len(b.updates) for b in pushed) <= 64  # the bed's batch size


@pytest.mark.parametrize(
    "profile",
    [pytest.param(CONTAINERD_2_0, id="containerd-2.0")],
)
async def test_pool_growth_waits_for_the_next_create_on_unsafe_runtimes(bed: Bed) -> None:
    assert not bed.plugin.unsolicited.enabled
    uid, cpus = await prepare_seen(bed, 2)
    await eventually(lambda: bed.plugin.shared_pool == ONLINE - cpus, "pool watch", timeout=10)
    web = bed.runtime.add_pod("web")
    old = await bed.runtime.create_container(web, "old")
    await bed.allocator.unprepare(uid)
    await eventually(lambda: bed.plugin.shared_pool == ONLINE, "pool watch", timeout=10)
    assert bed.runtime.cpus(old) == (ONLINE - cpus).format()
    assert bed.runtime.unsolicited == []
    await bed.runtime.create_container(web, "new")
    assert bed.runtime.cpus(old) == ONLINE.format()


@pytest.mark.parametrize("unsolicited_mode", [UnsolicitedMode.OFF])
async def test_flag_off_overrides_a_safe_runtime(bed: Bed) -> None:
    assert not bed.plugin.unsolicited.enabled
    assert "forced off" in bed.plugin.unsolicited.reason


async def test_synchronize_rebuilds_and_reapplies_after_a_runtime_restart(bed: Bed) -> None:
    uid, cpus = await prepare_seen(bed, 2)
    db = bed.runtime.add_pod("db")
    web = bed.runtime.add_pod("web")
    pinned = await bed.runtime.create_container(db, "postgres", claim_env((uid, cpus)))
    shared = await bed.runtime.create_container(web, "nginx")
    malformed = await bed.runtime.create_container(web, "odd")
    # Someone changes cpusets behind the plugin's back, and one container carries a bad env.
    bed.runtime.containers[pinned].linux.resources.cpu.cpus = "0-7"
    bed.runtime.containers[shared].linux.resources.cpu.cpus = "0"
    bed.runtime.containers[malformed].env.append("DRA_CPUSET_x=oops")
    bed.runtime.containers[malformed].linux.resources.cpu.cpus = "5"
    connects = bed.stub.status.connects
    await bed.runtime.restart()
    await eventually(lambda: bed.stub.status.connects > connects, "reconnect", timeout=10)
    await bed.runtime.wait_plugin()
    assert CPUSet.parse(bed.runtime.cpus(pinned)) == cpus
    assert CPUSet.parse(bed.runtime.cpus(shared)) == ONLINE - cpus
    assert bed.runtime.cpus(malformed) == "5"
    assert {r.container_id for r in bed.plugin.registry} == {pinned, shared}


async def test_a_container_removed_while_disconnected_goes_at_the_next_synchronize(
    bed: Bed,
) -> None:
    # A runtime sends StopContainer/RemoveContainer only to the plugins connected at that
    # moment: what the plugin shows is eventually consistent with the runtime.
    uid, cpus = await prepare_seen(bed, 2)
    pod = bed.runtime.add_pod("db")
    pinned = await bed.runtime.create_container(pod, "postgres", claim_env((uid, cpus)))
    kept = await bed.runtime.create_container(pod, "sidecar")
    connects = bed.stub.status.connects
    await bed.runtime.stop()
    await bed.runtime.stop_container(pinned)
    await bed.runtime.remove_container(pinned)
    assert bed.plugin.registry.get(pinned) is not None  # last known, until it hears again
    await bed.runtime.start()
    await eventually(lambda: bed.stub.status.connects > connects, "reconnect", timeout=10)
    await bed.runtime.wait_plugin()
    assert [r.container_id for r in bed.plugin.registry] == [kept]

    # The allocator hears of the missed stop too: the claim no longer names a running container.
    async def detached() -> bool:
        return not (await bed.allocator.claim(uid)).owner.container_id

    await eventually(detached, "the allocator to detach the removed container", timeout=10)


async def test_cpus_held_for_an_unprepared_claim_return_when_its_container_went_unseen(
    bed: Bed,
) -> None:
    # Unprepared while its container runs: the CPUs stay out of the pool until it stops. The
    # stop comes while the plugin is away; the next Synchronize hands them back.
    uid, cpus = await prepare_seen(bed, 2)
    pod = bed.runtime.add_pod("db")
    pinned = await bed.runtime.create_container(pod, "postgres", claim_env((uid, cpus)))
    await bed.allocator.unprepare(uid)
    assert await bed.allocator.shared() == ONLINE - cpus
    connects = bed.stub.status.connects
    await bed.runtime.stop()
    await bed.runtime.stop_container(pinned)
    await bed.runtime.remove_container(pinned)
    await bed.runtime.start()
    await eventually(lambda: bed.stub.status.connects > connects, "reconnect", timeout=10)
    await bed.runtime.wait_plugin()

    async def pool_whole() -> bool:
        return await bed.allocator.shared() == ONLINE

    await eventually(pool_whole, "the held CPUs back in the shared pool", timeout=10)


@pytest.mark.parametrize("profile", [pytest.param(RuntimeProfile(sync_chunk=7), id="chunks-of-7")])
async def test_chunked_synchronize(bed: Bed) -> None:
    web = bed.runtime.add_pod("web")
    ids = [await bed.runtime.create_container(web, f"c{i}") for i in range(30)]
    for cid in ids:
        bed.runtime.containers[cid].linux.resources.cpu.cpus = "3"
    await bed.runtime.restart()
    await bed.runtime.wait_plugin()
    await eventually(lambda: bed.stub.ready, "plugin ready", timeout=10)
    assert {bed.runtime.cpus(c) for c in ids} == {ONLINE.format()}
    assert bed.runtime.rejections == []


async def test_stopped_containers_are_not_tracked_after_synchronize(bed: Bed) -> None:
    web = bed.runtime.add_pod("web")
    cid = await bed.runtime.create_container(web, "gone")
    bed.runtime.containers[cid].state = api_pb2.CONTAINER_STOPPED
    await bed.runtime.restart()
    await bed.runtime.wait_plugin()
    assert bed.plugin.registry.get(cid) is None


async def test_allocator_down_shared_containers_still_start_claimed_ones_are_refused(
    bed: Bed,
) -> None:
    uid, cpus = await prepare_seen(bed, 2)
    stop_process(bed.allocator.process)
    web = bed.runtime.add_pod("web")
    shared = await bed.runtime.create_container(web, "nginx")
    assert CPUSet.parse(bed.runtime.cpus(shared)) == ONLINE - cpus
    pod = bed.runtime.add_pod("db")
    with pytest.raises(CreateContainerError, match="attach container"):
        await bed.runtime.create_container(pod, "postgres", claim_env((uid, cpus)))
    assert bed.plugin.registry.get(shared) is not None
    assert len(bed.plugin.registry) == 1


@pytest.mark.parametrize(
    "profile", [pytest.param(RuntimeProfile(request_timeout=8.0), id="request-timeout-8s")]
)
async def test_a_claimed_container_waits_for_a_slow_allocator_as_long_as_the_runtime_does(
    bed: Bed,
) -> None:
    # The allocator stalls 3 s, past the client's own 1.5 s but inside the 8 s the runtime
    # gives a CreateContainer: the container is pinned, not refused.
    uid, cpus = await prepare_seen(bed, 2)
    pod = bed.runtime.add_pod("db")
    os.kill(bed.allocator.process.pid, signal.SIGSTOP)
    resume = asyncio.get_running_loop().call_later(
        3.0, os.kill, bed.allocator.process.pid, signal.SIGCONT
    )
    try:
        began = time.monotonic()
        cid = await bed.runtime.create_container(pod, "postgres", claim_env((uid, cpus)))
        waited = time.monotonic() - began
    finally:
        resume.cancel()
        os.kill(bed.allocator.process.pid, signal.SIGCONT)
    assert CPUSet.parse(bed.runtime.cpus(cid)) == cpus
    assert waited >= 2.5, waited  # it did wait for the stalled allocator


async def test_shutdown_from_the_runtime_is_answered_then_the_plugin_reconnects(bed: Bed) -> None:
    plugin = await bed.runtime.wait_plugin()
    connects = bed.stub.status.connects
    reply = await plugin.client.call(
        PLUGIN_SERVICE, "Shutdown", api_pb2.Empty().SerializeToString(), timeout=5
    )
    assert reply == b""
    await eventually(lambda: bed.stub.status.connects > connects, "reconnect", timeout=10)
    await bed.runtime.wait_plugin()
    await eventually(lambda: bed.stub.ready, "synchronized again", timeout=10)
