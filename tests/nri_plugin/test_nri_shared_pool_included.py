"""A claim with `cpuConfig.sharedPool: include`, as the runtime sees it: its container's cpuset
is the claim's CPUs and the shared pool, it follows the pool as other claims take CPUs from it
and give them back, its claim's CPUs never reach another container, and its env tells the two
parts apart (`DRA_CPUSET_<uid>`, `DRA_SHARED_CPUSET_<uid>`). The machine is single-4c8t (CPUs
0-7) with no shared-pool floor (the pool can be empty)."""

from __future__ import annotations

from pathlib import Path

import pytest
from harness.nri_bed import ONLINE, Bed, claim_env, new_plugin, stop_tasks
from harness.waits import eventually

from dracpu.core.cpuset import CPUSet
from dracpu.nri_plugin.servicer import NRIPluginView
from dracpu.nri_plugin.transport.compat import UnsolicitedMode
from dracpu.pb.nri_plugin.v1 import nri_plugin_pb2


async def prepare(bed: Bed, count: int, shared_pool: str = "") -> tuple[str, CPUSet]:
    """A claim prepared, and the plugin's watched pool caught up with it."""
    uid, cpus = await bed.allocator.prepare(count, shared_pool=shared_pool)
    pool = await bed.allocator.shared()
    await eventually(lambda: bed.plugin.shared_pool == pool, "plugin to see the pool", timeout=10)
    return uid, cpus


def cpus_of(bed: Bed, container_id: str) -> CPUSet:
    return CPUSet.parse(bed.runtime.cpus(container_id))


def env_of(bed: Bed, container_id: str) -> dict[str, str]:
    entries = bed.runtime.containers[container_id].env
    return dict(entry.split("=", 1) for entry in entries)


def others_on(bed: Bed, cpus: CPUSet, owner: str) -> dict[str, str]:
    """Every container but `owner` whose cpuset touches `cpus`."""
    return {
        cid: text
        for cid, text in bed.runtime.cpusets().items()
        if cid != owner and CPUSet.parse(text) & cpus
    }


async def test_its_container_runs_on_the_claims_cpus_and_the_pool_and_its_env_says_which(
    bed: Bed,
) -> None:
    web = bed.runtime.add_pod("web")
    shared = await bed.runtime.create_container(web, "nginx")
    uid, claimed = await prepare(bed, 2, "include")
    pool = await bed.allocator.shared()
    assert pool == ONLINE - claimed
    dpdk = bed.runtime.add_pod("dpdk")
    mixed = await bed.runtime.create_container(dpdk, "pmd", claim_env((uid, claimed)))

    assert cpus_of(bed, mixed) == claimed | pool
    env = env_of(bed, mixed)
    assert CPUSet.parse(env[f"DRA_CPUSET_{uid}"]) == claimed
    assert CPUSet.parse(env[f"DRA_SHARED_CPUSET_{uid}"]) == pool
    # Its claim's CPUs left the pool: the shared container was moved off them.
    assert cpus_of(bed, shared) == pool
    assert others_on(bed, claimed, mixed) == {}
    record = bed.plugin.registry.get(mixed)
    assert record is not None and record.own == claimed and record.follows_pool


async def test_an_excluding_claims_container_gets_neither_the_pool_nor_the_variable(
    bed: Bed,
) -> None:
    for shared_pool in ("exclude", ""):
        uid, claimed = await prepare(bed, 1, shared_pool)
        pod = bed.runtime.add_pod(f"p-{shared_pool or 'unset'}")
        cid = await bed.runtime.create_container(pod, "app", claim_env((uid, claimed)))
        assert cpus_of(bed, cid) == claimed
        assert f"DRA_SHARED_CPUSET_{uid}" not in env_of(bed, cid)


async def test_it_follows_the_pool_as_another_claim_takes_cpus_and_gives_them_back(
    bed: Bed,
) -> None:
    web = bed.runtime.add_pod("web")
    shared = await bed.runtime.create_container(web, "nginx")
    uid, claimed = await prepare(bed, 2, "include")
    dpdk = bed.runtime.add_pod("dpdk")
    mixed = await bed.runtime.create_container(dpdk, "pmd", claim_env((uid, claimed)))

    # Another claim takes CPUs from the pool: its container's creation moves both the shared
    # container and the mixed one onto the smaller pool.
    other, taken = await prepare(bed, 3)
    db = bed.runtime.add_pod("db")
    pinned = await bed.runtime.create_container(db, "postgres", claim_env((other, taken)))
    smaller = await bed.allocator.shared()
    assert smaller == ONLINE - claimed - taken
    assert cpus_of(bed, mixed) == claimed | smaller
    assert cpus_of(bed, pinned) == taken
    assert cpus_of(bed, shared) == smaller
    assert others_on(bed, claimed, mixed) == {}
    assert others_on(bed, taken, pinned) == {}
    # The variable keeps the pool of its creation; the cpuset is the live truth.
    assert CPUSet.parse(env_of(bed, mixed)[f"DRA_SHARED_CPUSET_{uid}"]) == ONLINE - claimed

    # Given back: the pool grows and the mixed container follows it, unasked.
    await bed.runtime.remove_container(pinned)
    await bed.allocator.unprepare(other)
    await bed.runtime.wait_for(lambda: cpus_of(bed, mixed) == ONLINE)
    await bed.runtime.wait_for(lambda: cpus_of(bed, shared) == ONLINE - claimed)
    assert others_on(bed, claimed, mixed) == {}


@pytest.mark.parametrize("unsolicited_mode", [UnsolicitedMode.OFF])
async def test_without_pushes_the_next_creation_moves_it_onto_the_new_pool(bed: Bed) -> None:
    uid, claimed = await prepare(bed, 2, "include")
    dpdk = bed.runtime.add_pod("dpdk")
    mixed = await bed.runtime.create_container(dpdk, "pmd", claim_env((uid, claimed)))
    other, taken = await prepare(bed, 3)
    # Nothing is pushed: the mixed container still has the CPUs the other claim took.
    assert cpus_of(bed, mixed) == ONLINE
    db = bed.runtime.add_pod("db")
    await bed.runtime.create_container(db, "postgres", claim_env((other, taken)))
    assert cpus_of(bed, mixed) == ONLINE - taken


async def test_an_empty_pool_leaves_it_on_its_claims_cpus(bed: Bed) -> None:
    uid, claimed = await prepare(bed, 2, "include")
    dpdk = bed.runtime.add_pod("dpdk")
    mixed = await bed.runtime.create_container(dpdk, "pmd", claim_env((uid, claimed)))
    assert cpus_of(bed, mixed) == ONLINE
    other, rest = await prepare(bed, 6)
    assert await bed.allocator.shared() == CPUSet()
    db = bed.runtime.add_pod("db")
    pinned = await bed.runtime.create_container(db, "postgres", claim_env((other, rest)))
    assert cpus_of(bed, mixed) == claimed
    assert cpus_of(bed, pinned) == rest


async def test_a_runtime_restart_puts_it_back_on_the_claims_cpus_and_the_pool(bed: Bed) -> None:
    uid, claimed = await prepare(bed, 2, "include")
    dpdk = bed.runtime.add_pod("dpdk")
    mixed = await bed.runtime.create_container(dpdk, "pmd", claim_env((uid, claimed)))
    # Lost behind the plugin's back (a runtime that forgot the update).
    bed.runtime.containers[mixed].linux.resources.cpu.cpus = claimed.format()
    connects = bed.stub.status.connects
    await bed.runtime.restart()
    await eventually(lambda: bed.stub.status.connects > connects, "reconnect", timeout=10)
    await bed.runtime.wait_plugin()
    assert cpus_of(bed, mixed) == ONLINE


async def test_a_restarted_plugin_learns_it_from_the_allocator_and_keeps_following(
    bed: Bed,
) -> None:
    """The registry is rebuilt from the runtime: Adopt answers which claims include the pool."""
    uid, claimed = await prepare(bed, 2, "include")
    dpdk = bed.runtime.add_pod("dpdk")
    mixed = await bed.runtime.create_container(dpdk, "pmd", claim_env((uid, claimed)))
    await stop_tasks(bed.stub, bed.tasks)
    plugin, stub, client, tasks = new_plugin(
        bed.allocator, Path(bed.runtime.socket_path), UnsolicitedMode.AUTO
    )
    try:
        await eventually(lambda: plugin.registry.get(mixed) is not None, "resync", timeout=10)
        record = plugin.registry.get(mixed)
        assert record is not None and record.own == claimed
        other, taken = await bed.allocator.prepare(2)
        pool = await bed.allocator.shared()
        await eventually(lambda: plugin.shared_pool == pool, "plugin to see the pool", timeout=10)
        db = bed.runtime.add_pod("db")
        await bed.runtime.create_container(db, "postgres", claim_env((other, taken)))
        assert cpus_of(bed, mixed) == claimed | pool
    finally:
        await stop_tasks(stub, tasks)
        await client.close()


async def test_the_view_shows_its_claimed_cpus_beside_the_pool(bed: Bed) -> None:
    uid, claimed = await prepare(bed, 2, "include")
    plain, alone = await prepare(bed, 1)
    dpdk = bed.runtime.add_pod("dpdk")
    mixed = await bed.runtime.create_container(dpdk, "pmd", claim_env((uid, claimed)))
    pinned = await bed.runtime.create_container(dpdk, "db", claim_env((plain, alone)))
    web = await bed.runtime.create_container(dpdk, "web")
    view = await NRIPluginView(bed.plugin, bed.stub).ListContainers(
        nri_plugin_pb2.ListContainersRequest(), None
    )
    by_id = {c.container_id: c for c in view.containers}
    assert CPUSet.parse(by_id[mixed].claimed_cpus) == claimed and by_id[mixed].exclusive
    assert CPUSet.parse(by_id[mixed].cpus) == ONLINE - alone
    assert by_id[pinned].claimed_cpus == "" and by_id[pinned].exclusive
    assert by_id[web].claimed_cpus == "" and not by_id[web].exclusive
