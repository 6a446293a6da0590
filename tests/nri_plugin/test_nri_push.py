"""Shared-pool pushes converge: whatever the runtime did with a batch (applied it, lost the
answer, applied only part before its deadline, refused some), after any sequence of pool changes
every shared container ends on the current pool, and the registry says what the runtime has.

The runtime here is a stand-in with containerd's semantics for plugin-initiated updates: one
update after another at a fixed cost each, nothing applied after the request's deadline, and a
partial failure answered as an error without the failed list.
"""

from __future__ import annotations

import asyncio
import functools
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pytest
from harness.waits import eventually

from dracpu.core.cpuset import CPUSet
from dracpu.nri_plugin.cpu_plugin import CPUPlugin
from dracpu.nri_plugin.state.pacing import UpdatePacer
from dracpu.nri_plugin.transport.compat import UnsolicitedMode
from dracpu.nri_plugin.transport.plugin_service import RuntimeInfo
from dracpu.nri_plugin.transport.ttrpc import DEADLINE_EXCEEDED, UNKNOWN, TtrpcError
from dracpu.pb.allocator.v1 import allocator_pb2
from dracpu.pb.nri import api_pb2

FULL, SMALL = "0-3", "1-3"
CLAIM = "0000c1a1-0000-4000-8000-000000000001"


@dataclass
class PoolOnly:
    """The allocator as far as shared containers need it."""

    pool: str = FULL

    async def shared_pool(self) -> allocator_pb2.SharedPool:
        return allocator_pb2.SharedPool(cpus=self.pool, generation=1)

    async def reconcile(self, live: Sequence[str]) -> list[str]:
        return []

    async def adopt(
        self, container: allocator_pb2.ContainerRef, claims: Mapping[str, CPUSet]
    ) -> allocator_pb2.AdoptResponse:
        """Every claim accepted on the CPUs the container's env names."""
        return allocator_pb2.AdoptResponse(
            outcomes=[allocator_pb2.AdoptOutcome(claim_uid=uid, accepted=True) for uid in claims],
            cpus=functools.reduce(operator.or_, claims.values(), CPUSet()).format(),
            shared_pool=allocator_pb2.SharedPool(cpus=self.pool, generation=1),
        )


@dataclass
class SlowRuntime:
    cost: float = 0.002  # seconds per update
    lose_answers: int = 0  # this many calls apply everything (however long) but never answer
    refuse: set[str] = field(default_factory=set)  # container ids whose update fails
    # Container ids whose start has read their spec already but not yet run them: an update
    # is taken into the spec alone (answered as applied), and they run on what they had.
    starting: set[str] = field(default_factory=set)
    truth: dict[str, str] = field(default_factory=dict)
    calls: int = 0

    async def push(
        self, updates: Sequence[api_pb2.ContainerUpdate], timeout: float
    ) -> list[api_pb2.ContainerUpdate]:
        self.calls += 1
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        lose = self.lose_answers > 0
        self.lose_answers -= 1 if lose else 0
        failed = []
        for update in updates:
            if not lose and loop.time() >= end:
                break  # the request's context expired: the rest is not applied
            await asyncio.sleep(self.cost)
            if update.container_id in self.refuse:
                failed.append(update)
                continue
            if update.container_id in self.starting:
                continue
            self.truth[update.container_id] = update.linux.resources.cpu.cpus
        if lose or loop.time() > end:
            await asyncio.sleep(max(0.0, end - loop.time()))
            raise TtrpcError(DEADLINE_EXCEEDED, f"UpdateContainers got no answer in {timeout}")
        if failed:
            raise TtrpcError(UNKNOWN, "NRI update of some containers failed", remote=True)
        return []


def containerd_plugin(allocator: PoolOnly) -> CPUPlugin:
    """The plugin configured by a containerd whose NRI takes unsolicited updates."""
    plugin = CPUPlugin(allocator, unsolicited=UnsolicitedMode.ON)  # type: ignore[arg-type]
    plugin.configure(RuntimeInfo("containerd", "v2.4.2", "v0.12.3", 5.0, 0.1))
    return plugin


async def shared_plugin(runtime: SlowRuntime, allocator: PoolOnly, count: int) -> CPUPlugin:
    plugin = containerd_plugin(allocator)
    assert plugin.unsolicited.enabled and plugin.pacer.request_timeout == 0.1
    plugin.set_pusher(runtime.push)
    pod = api_pb2.PodSandbox(id="pod", uid="pod-uid", namespace="ns", name="pod")
    for index in range(count):
        ctr = api_pb2.Container(id=f"c{index:03d}", pod_sandbox_id="pod", name=f"c{index}")
        await plugin.create_container(pod, ctr)
        runtime.truth[ctr.id] = allocator.pool
    return plugin


async def change_pool(plugin: CPUPlugin, allocator: PoolOnly, cpus: str, generation: int) -> None:
    allocator.pool = cpus
    async with plugin.state.lock:
        plugin.state.pool.note(allocator_pb2.SharedPool(cpus=cpus, generation=generation))


async def converged(plugin: CPUPlugin, runtime: SlowRuntime, pool: str, timeout: float) -> None:
    def on_pool() -> bool:
        wrong = {cid: cpus for cid, cpus in runtime.truth.items() if cpus != pool}
        unconfirmed = [r.container_id for r in plugin.registry if not r.confirmed]
        stale = plugin.registry.stale(CPUSet.parse(pool))
        assert not wrong and not unconfirmed and not stale, (
            f"{len(wrong)} wrong, {len(unconfirmed)} unconfirmed, {len(stale)} stale"
        )
        return True

    await eventually(on_pool, f"every container on {pool}", timeout=timeout, interval=0.02)


def recorded(plugin: CPUPlugin) -> Mapping[str, str]:
    return {r.container_id: r.cpus.format() for r in plugin.registry}


@pytest.mark.parametrize(
    ("runtime", "count"),
    [
        (SlowRuntime(cost=0.0005), 60),
        (SlowRuntime(cost=0.004), 110),
        (SlowRuntime(cost=0.002, lose_answers=3), 80),
    ],
    ids=["fast-runtime", "slow-runtime-outgrows-the-batch", "answers-lost-after-applying"],
)
async def test_pool_changes_back_and_forth_end_with_every_container_on_the_pool(
    runtime: SlowRuntime, count: int
) -> None:
    allocator = PoolOnly()
    plugin = await shared_plugin(runtime, allocator, count)
    pusher = asyncio.create_task(plugin.push_pool_changes(retry_delay=0.02, max_delay=0.1))
    try:
        for generation, pool in enumerate([SMALL, FULL, SMALL, FULL], start=2):
            await change_pool(plugin, allocator, pool, generation)
            await asyncio.sleep(0.03)  # the next change lands mid-push
        await converged(plugin, runtime, FULL, timeout=20)
        assert recorded(plugin) == runtime.truth
        assert runtime.calls > 0
    finally:
        pusher.cancel()
        await asyncio.gather(pusher, return_exceptions=True)


async def test_a_timed_out_batch_is_unknown_not_failed() -> None:
    # The runtime applies the whole batch but its answer never comes: the plugin must not
    # believe the containers kept their old cpuset, or a pool change back to it sends nothing.
    # No cost per update: on a loaded machine even 20 short sleeps can outlast the 0.1 s
    # request timeout, and the second push must apply all 20 in one request.
    runtime = SlowRuntime(cost=0.0, lose_answers=1)
    allocator = PoolOnly()
    plugin = await shared_plugin(runtime, allocator, 20)
    plugin.pacer.observe(20, 20 * 0.0005)  # measured: the 20 fit one batch
    await change_pool(plugin, allocator, SMALL, 2)
    first = await plugin.push_once()
    assert (first.applied, first.unknown) == (0, 20)
    assert all(cpus == SMALL for cpus in runtime.truth.values())
    assert all(not r.confirmed for r in plugin.registry)
    await change_pool(plugin, allocator, FULL, 3)
    second = await plugin.push_once()
    assert (second.applied, second.pending) == (20, 0)
    assert set(runtime.truth.values()) == {FULL}
    assert recorded(plugin) == runtime.truth


async def test_refused_updates_are_found_by_splitting_and_retried() -> None:
    runtime = SlowRuntime(cost=0.0005, refuse={"c007"})
    allocator = PoolOnly()
    plugin = await shared_plugin(runtime, allocator, 16)
    await change_pool(plugin, allocator, SMALL, 2)
    result = await plugin.push_once()
    assert (result.applied, result.failed, result.pending) == (15, 1, 1)
    # The refused one still runs on what it had, and the registry says so.
    assert runtime.truth["c007"] == FULL and recorded(plugin)["c007"] == FULL
    runtime.refuse.clear()
    again = await plugin.push_once()
    assert (again.applied, again.pending) == (1, 0)
    assert set(runtime.truth.values()) == {SMALL}


async def test_moves_answered_with_a_create_are_confirmed_by_a_push_of_their_own() -> None:
    # A claimed container's CreateContainer shrank the pool; its answer carries the moves of
    # the shared containers, and the runtime applies them after answering, telling nobody:
    # one it could not apply (a container whose task did not answer in time, on a loaded
    # node) must not stay on the old pool, which now holds the claim's CPUs.
    runtime = SlowRuntime(cost=0.0)
    allocator = PoolOnly()
    plugin = await shared_plugin(runtime, allocator, 8)
    await change_pool(plugin, allocator, SMALL, 2)
    pod = api_pb2.PodSandbox(id="pod", uid="pod-uid", namespace="ns", name="pod")
    new = api_pb2.Container(id="new", pod_sandbox_id="pod", name="new")
    answer = await plugin.create_container(pod, new)
    runtime.truth["new"] = answer.adjust.linux.resources.cpu.cpus
    moves = {u.container_id: u.linux.resources.cpu.cpus for u in answer.update}
    assert moves == {f"c{index:03d}": SMALL for index in range(8)}
    lost = "c005"  # the one the runtime could not apply
    runtime.truth.update({cid: cpus for cid, cpus in moves.items() if cid != lost})
    assert runtime.truth[lost] == FULL
    pusher = asyncio.create_task(plugin.push_pool_changes(retry_delay=0.02, max_delay=0.1))
    try:
        await converged(plugin, runtime, SMALL, timeout=20)
        assert recorded(plugin) == runtime.truth
    finally:
        pusher.cancel()
        await asyncio.gather(pusher, return_exceptions=True)


async def test_moves_answered_with_a_synchronize_are_confirmed_by_a_push_of_their_own() -> None:
    # The plugin registered again (it was restarted, or the runtime was) while the pool had
    # shrunk: the Synchronize answer moves the shared containers, and the runtime drops an
    # update that fails (ignore_failure) telling nobody. The one it dropped must not stay on
    # the old pool, which now holds a claim's CPUs.
    runtime = SlowRuntime(cost=0.0)
    plugin = containerd_plugin(PoolOnly(pool=SMALL))
    plugin.set_pusher(runtime.push)
    pod = api_pb2.PodSandbox(id="pod", uid="pod-uid", namespace="ns", name="pod")
    running = []
    for index in range(6):
        ctr = api_pb2.Container(
            id=f"c{index:03d}", pod_sandbox_id="pod", name=f"c{index}",
            state=api_pb2.CONTAINER_RUNNING,
        )  # fmt: skip
        ctr.linux.resources.cpu.cpus = FULL
        running.append(ctr)
        runtime.truth[ctr.id] = FULL
    on_pool = api_pb2.Container(
        id="c100", pod_sandbox_id="pod", name="c100", state=api_pb2.CONTAINER_RUNNING
    )
    on_pool.linux.resources.cpu.cpus = SMALL
    runtime.truth[on_pool.id] = SMALL
    updates = await plugin.synchronize([pod], [*running, on_pool])
    moves = {u.container_id: u.linux.resources.cpu.cpus for u in updates}
    assert moves == {f"c{index:03d}": SMALL for index in range(6)} | {"c100": SMALL}
    lost = "c003"  # the one the runtime could not apply
    runtime.truth.update({cid: cpus for cid, cpus in moves.items() if cid != lost})
    assert runtime.truth[lost] == FULL
    # Only the moved ones wait for a push: the one the runtime showed on the pool is on it.
    assert {r.container_id for r in plugin.registry if not r.confirmed} == set(moves) - {"c100"}
    calls = runtime.calls
    pusher = asyncio.create_task(plugin.push_pool_changes(retry_delay=0.02, max_delay=0.1))
    try:
        await converged(plugin, runtime, SMALL, timeout=20)
        assert recorded(plugin) == runtime.truth
        assert runtime.calls > calls
    finally:
        pusher.cancel()
        await asyncio.gather(pusher, return_exceptions=True)


async def test_a_claimed_container_pinned_by_a_synchronize_is_confirmed_by_a_push() -> None:
    # A claimed container the runtime started while the plugin was away runs on every CPU. The
    # Synchronize answer pins it to its claim, and the runtime drops an update that fails
    # (ignore_failure) telling nobody: the container must not stay on other claims' CPUs.
    runtime = SlowRuntime(cost=0.0)
    plugin = containerd_plugin(PoolOnly(pool="0-1"))
    plugin.set_pusher(runtime.push)
    pod = api_pb2.PodSandbox(id="pod", uid="pod-uid", namespace="ns", name="pod")
    claimed = api_pb2.Container(
        id="c200", pod_sandbox_id="pod", name="work", state=api_pb2.CONTAINER_RUNNING,
        env=[f"DRA_CPUSET_{CLAIM}=2-3"],
    )  # fmt: skip
    claimed.linux.resources.cpu.cpus = FULL
    runtime.truth[claimed.id] = FULL
    updates = await plugin.synchronize([pod], [claimed])
    assert [(u.container_id, u.linux.resources.cpu.cpus) for u in updates] == [("c200", "2-3")]
    assert runtime.truth[claimed.id] == FULL  # the runtime could not apply it
    assert [r.container_id for r in plugin.registry if not r.confirmed] == ["c200"]
    pusher = asyncio.create_task(plugin.push_pool_changes(retry_delay=0.02, max_delay=0.1))
    try:

        def pinned() -> bool:
            record = plugin.registry.get(claimed.id)
            assert runtime.truth[claimed.id] == "2-3", runtime.truth
            assert record is not None and record.confirmed, record
            return True

        await eventually(pinned, "the claimed container pinned and confirmed", timeout=20)
    finally:
        pusher.cancel()
        await asyncio.gather(pusher, return_exceptions=True)


async def test_a_move_taken_while_the_container_started_is_sent_again_once_it_runs() -> None:
    # containerd takes an update of a container that does not run yet into its spec alone; a
    # start that had read the spec already runs it on its creation's cpuset, though the update
    # was answered as applied.
    runtime = SlowRuntime(cost=0.0)
    allocator = PoolOnly()
    plugin = await shared_plugin(runtime, allocator, 4)  # created, none started yet
    runtime.starting = set(runtime.truth)
    await change_pool(plugin, allocator, SMALL, 2)
    result = await plugin.push_once()
    assert (result.applied, result.pending) == (4, 0)
    assert set(runtime.truth.values()) == {FULL}  # answered, not applied
    pusher = asyncio.create_task(plugin.push_pool_changes(retry_delay=0.02, max_delay=0.1))
    mover = asyncio.create_task(plugin.move_adopted())  # moves again what moved before its start
    try:
        pod = api_pb2.PodSandbox(id="pod", uid="pod-uid", namespace="ns", name="pod")
        for index in range(4):
            ctr = api_pb2.Container(id=f"c{index:03d}", pod_sandbox_id="pod", name=f"c{index}")
            runtime.starting.discard(ctr.id)
            await plugin.post_start_container(pod, ctr)
        await converged(plugin, runtime, SMALL, timeout=20)
        assert recorded(plugin) == runtime.truth
    finally:
        pusher.cancel()
        mover.cancel()
        await asyncio.gather(pusher, mover, return_exceptions=True)


async def test_a_container_synchronized_while_it_started_is_moved_again_once_it_runs() -> None:
    # The plugin registered while the runtime was starting a container: the Synchronize
    # answer's update for it may reach its spec alone, so it is moved again at its start.
    plugin = containerd_plugin(PoolOnly(pool=SMALL))
    pod = api_pb2.PodSandbox(id="pod", uid="pod-uid", namespace="ns", name="pod")
    # A claimed one: its record holds its claim's CPUs before the update, as a shared one's
    # does not.
    starting = api_pb2.Container(
        id="starting", pod_sandbox_id="pod", name="starting", state=api_pb2.CONTAINER_CREATED
    )
    starting.env.extend(["DRA_CPUSET_claim-a=0"])
    starting.linux.resources.cpu.cpus = FULL
    running = api_pb2.Container(
        id="running", pod_sandbox_id="pod", name="running", state=api_pb2.CONTAINER_RUNNING
    )
    running.linux.resources.cpu.cpus = FULL
    updates = await plugin.synchronize([pod], [starting, running])
    assert {u.container_id: u.linux.resources.cpu.cpus for u in updates} == {
        "starting": "0",
        "running": SMALL,
    }
    assert not plugin.adoptions.pending
    await plugin.post_start_container(pod, starting)
    assert set(plugin.adoptions.pending) == {"starting"}


@pytest.mark.parametrize(
    ("observed", "batch_at_most", "batch_at_least"),
    [
        ([], 500, 1),  # prior: 2 s * 0.25 / 30 ms -> 16
        ([(20, 20 * 0.027)], 19, 18),  # runc at 27 ms per container
        ([(10, 10 * 0.001)] * 5, 500, 400),
        ([(100, 100 * 0.2)], 3, 1),
    ],
    ids=["prior", "runc-27ms", "fast", "very-slow"],
)
def test_batch_size_follows_the_measured_cost(
    observed: list[tuple[int, float]], batch_at_most: int, batch_at_least: int
) -> None:
    pacer = UpdatePacer(request_timeout=2.0, max_batch=500)
    for count, seconds in observed:
        pacer.observe(count, seconds)
    size = pacer.batch_size()
    assert batch_at_least <= size <= batch_at_most
    # The wait for a batch always covers its expected time several times over.
    assert pacer.deadline(size) >= 3 * size * pacer.cost


def test_a_timeout_raises_the_cost_estimate() -> None:
    pacer = UpdatePacer(request_timeout=2.0)
    before = pacer.batch_size()
    pacer.observe_timeout()
    assert pacer.batch_size() < before
