"""Memory placement as the runtime sees it: a claimed container whose claim is placed gets
`linux.resources.cpu.mems` in its CreateContainer adjustment, and again in every Synchronize
(runtime restart, plugin restart); shared containers and unplaced claims never get mems, so
they keep every memory node. The machine is single-4c8t: one NUMA node, node 0."""

from __future__ import annotations

from pathlib import Path

from harness.nri_bed import ONLINE, Bed, claim_env, new_plugin, prepare_seen, stop_tasks
from harness.waits import eventually

from dracpu.core.cpuset import CPUSet
from dracpu.nri_plugin.compat import UnsolicitedMode


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
