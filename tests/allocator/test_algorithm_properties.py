"""Invariants of `take_cpus` on random realistic machines.

Machines vary in sockets, NUMA nodes per socket (or sockets per NUMA node), cores, SMT width,
sibling numbering (threads of a core adjacent, or thread t of core c at c + t·cores), core ids
(global, or restarting in every socket as sysfs reports them), uncore caches (known or not) and
offline threads. Whatever the machine and the free CPUs, every answer is a subset of the free
CPUs of exactly the requested size, or a clear error when that is truly impossible.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dracpu.allocator.algorithm import Policy, take_cpus
from dracpu.allocator.algorithm.accumulator import Accumulator
from dracpu.allocator.algorithm.topology_index import index_for
from dracpu.core.cpuset import CPUSet
from dracpu.core.errors import InsufficientCPUsError, InvalidInputError
from dracpu.core.machine import CPUInfo, Machine

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@dataclass(frozen=True)
class Layout:
    sockets: int
    numa_per_socket: int  # 0 means two sockets share one NUMA node
    cores_per_numa: int
    threads: int
    adjacent_siblings: bool
    per_socket_core_ids: bool
    uncores_per_numa: int  # 0 means the cache topology is unknown


def build_machine(layout: Layout, offline: set[int]) -> Machine:
    domains = max(layout.numa_per_socket, 1)
    cores_per_socket = domains * layout.cores_per_numa
    cores_total = layout.sockets * cores_per_socket
    cpus: list[CPUInfo] = []
    for core in range(cores_total):
        socket, local = divmod(core, cores_per_socket)
        domain = socket * domains + local // layout.cores_per_numa
        numa = domain if layout.numa_per_socket else socket // 2
        uncore = -1
        if layout.uncores_per_numa:
            share = (local % layout.cores_per_numa) * layout.uncores_per_numa
            uncore = domain * layout.uncores_per_numa + share // layout.cores_per_numa
        for thread in range(layout.threads):
            cpu_id = (
                core * layout.threads + thread
                if layout.adjacent_siblings
                else core + thread * cores_total
            )
            cpus.append(
                CPUInfo(
                    cpu_id=cpu_id,
                    core_id=local if layout.per_socket_core_ids else core,
                    socket_id=socket,
                    numa_node_id=numa,
                    uncore_cache_id=uncore,
                )
            )
    online = [c for c in cpus if c.cpu_id not in offline] or cpus[:1]
    return Machine.build(online)


layouts = st.builds(
    Layout,
    sockets=st.sampled_from([1, 2, 2, 4]),
    numa_per_socket=st.sampled_from([0, 1, 1, 2, 4]),
    cores_per_numa=st.integers(1, 6),
    threads=st.sampled_from([1, 2, 2, 4]),
    adjacent_siblings=st.booleans(),
    per_socket_core_ids=st.booleans(),
    uncores_per_numa=st.sampled_from([0, 1, 2]),
)


@st.composite
def machines(draw: st.DrawFn, symmetric: bool = False) -> Machine:
    layout = draw(layouts)
    size = layout.sockets * max(layout.numa_per_socket, 1) * layout.cores_per_numa * 4
    offline = set() if symmetric else draw(st.sets(st.integers(0, size), max_size=4))
    return build_machine(layout, offline)


@st.composite
def requests(draw: st.DrawFn, symmetric: bool = False) -> tuple[Machine, CPUSet, int]:
    machine = draw(machines(symmetric))
    ids = machine.cpu_set.sorted()
    free = draw(st.sets(st.sampled_from(ids), min_size=1)) if draw(st.booleans()) else set(ids)
    # Ids the machine does not have (offline CPUs) must never be handed out.
    stray = draw(st.sets(st.integers(0, ids[-1] + 8), max_size=3))
    count = draw(st.integers(1, len(ids) + 2))
    return machine, CPUSet(free | stray), count


policies = st.builds(
    Policy,
    strategy=st.sampled_from(["packed", "spread"]),
    align_uncore=st.booleans(),
    distribute_numa=st.booleans(),
    group_size=st.sampled_from([1, 1, 2, 3, 4]),
)


@SETTINGS
@given(request=requests(), policy=policies)
def test_answer_is_exactly_count_free_cpus(
    request: tuple[Machine, CPUSet, int], policy: Policy
) -> None:
    machine, available, count = request
    free = available & machine.cpu_set
    try:
        result = take_cpus(machine, available, count, policy)
    except InsufficientCPUsError as exc:
        # Without whole-core constraints, only a lack of free CPUs can make a request fail.
        assert count > len(free), f"failed with {len(free)} free CPUs for {count}: {exc}"
        assert f"want {count}" in str(exc)
        return
    assert result.issubset(free)
    assert len(result) == count


def threads_of(machine: Machine, cpus: CPUSet) -> list[CPUSet]:
    return [core for core in machine.cores.values() if not core.isdisjoint(cpus)]


@SETTINGS
@given(request=requests(), policy=policies)
def test_full_pcpus_only_hands_out_whole_cores(
    request: tuple[Machine, CPUSet, int], policy: Policy
) -> None:
    machine, available, count = request
    policy = Policy(
        align_uncore=policy.align_uncore,
        distribute_numa=policy.distribute_numa,
        group_size=policy.group_size,
        full_pcpus_only=True,
    )
    free = available & machine.cpu_set
    try:
        result = take_cpus(machine, available, count, policy)
    except (InsufficientCPUsError, InvalidInputError):
        return
    assert result.issubset(free)
    assert len(result) == count
    assert all(core.issubset(result) for core in threads_of(machine, result))


@SETTINGS
@given(request=requests(symmetric=True), policy=policies, data=st.data())
def test_full_pcpus_only_succeeds_when_whole_cores_suffice(
    request: tuple[Machine, CPUSet, int], policy: Policy, data: st.DataObject
) -> None:
    """On a machine with all threads online, enough whole free cores always suffice."""
    machine, available, _ = request
    free = available & machine.cpu_set
    whole = [core for core in machine.cores.values() if core.issubset(free)]
    width = max(len(core) for core in machine.cores.values())
    if not whole:
        return
    count = width * data.draw(st.integers(1, len(whole)))
    policy = Policy(
        align_uncore=policy.align_uncore,
        distribute_numa=policy.distribute_numa,
        # Groups must be whole cores (1 means one core).
        group_size=data.draw(st.sampled_from([1, width, 2 * width])),
        full_pcpus_only=True,
    )
    result = take_cpus(machine, available, count, policy)
    assert len(result) == count
    assert all(core.issubset(result) for core in threads_of(machine, result))


@SETTINGS
@given(request=requests(), policy=policies)
def test_same_request_same_answer(request: tuple[Machine, CPUSet, int], policy: Policy) -> None:
    """Placement is a function of its inputs: a rebuilt Machine (fresh caches) agrees."""
    machine, available, count = request
    twin = Machine.build(machine.cpus)
    try:
        first = take_cpus(machine, available, count, policy)
    except InsufficientCPUsError:
        return
    assert take_cpus(twin, available, count, policy) == first


@SETTINGS
@given(request=requests(), policy=policies)
def test_taking_everything_free_returns_everything_free(
    request: tuple[Machine, CPUSet, int], policy: Policy
) -> None:
    machine, available, _ = request
    free = available & machine.cpu_set
    assert take_cpus(machine, available, len(free), policy) == free


def test_a_core_whose_threads_lie_in_two_numa_nodes_is_ordered_once() -> None:
    """On a machine where one core's threads sit in different NUMA nodes (the cores do not
    partition the nodes), the kubelet's core order still lists each core once, and a take of
    every count gives that many distinct free CPUs."""
    numa_of = {0: 0, 1: 0, 2: 0, 3: 1, 4: 1, 5: 1, 6: 1, 7: 1}
    machine = Machine.build(
        [
            CPUInfo(cpu_id=cpu, core_id=cpu // 2, socket_id=0, numa_node_id=numa_of[cpu])
            for cpu in range(8)
        ]
    )
    index = index_for(machine)
    assert not index.cores_partitioned
    free = CPUSet([1, 2, 3, 4, 6, 7])
    order = Accumulator(index, free.mask, 1).sorted_cores()
    assert sorted(order) == [0, 1, 2, 3]
    for count in range(1, len(free) + 1):
        for policy in (Policy(), Policy(strategy="spread")):
            taken = take_cpus(machine, free, count, policy)
            assert len(taken) == count and taken.issubset(free)
