"""The NUMA-distributed take's search, made fast on many nearly exhausted NUMA nodes, chooses
exactly what the walk it replaced chose.

The walk over NUMA combinations and remainder subsets now knows the exact least sum of squares
of every remainder size (`remainder_floor`), remembers what it learnt about the free counts it
met, and takes inside each NUMA node without sorting the rest of the machine. None of that may
change an answer: every property here holds the new code to the previous one, a copy of which
(as of commit 57d4b7b, comments left out) is the oracle at the end of this module, on random
machines and free CPUs shaped like the benchmark's: up to 32 NUMA nodes, most nearly exhausted.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from itertools import combinations
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dracpu.allocator.algorithm import Policy, distributed, numa_plan, take_cpus
from dracpu.allocator.algorithm.balance import mean, standard_deviation
from dracpu.allocator.algorithm.numa_plan import Plan, Problem, best_plan
from dracpu.allocator.algorithm.packed import take_packed, take_packed_in_numa
from dracpu.allocator.algorithm.remainder import deal
from dracpu.allocator.algorithm.remainder_floor import most_relief, relief_bound
from dracpu.allocator.algorithm.topology_index import (
    MAX_LOCAL_RUNS,
    global_mask,
    index_for,
    local_mask,
)
from dracpu.core.cpuset import CPUSet
from dracpu.core.errors import InsufficientCPUsError
from dracpu.core.machine import CPUInfo, Machine

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ---- named cases: the benchmark's slowest shapes ----------------------------------------


@dataclass(frozen=True)
class Case:
    name: str
    # Per socket, "numa:free" of each NUMA node in the walk's order (by free CPUs).
    sockets: tuple[str, ...]
    count: int
    group_size: int
    k: int
    expected: Plan

    def problem(self) -> Problem:
        pairs = [item.split(":") for socket in self.sockets for item in socket.split()]
        free = {int(numa): int(count) for numa, count in pairs}
        return Problem(tuple(free), free, self.count, self.group_size, self.k)


CASES = [
    Case(
        "22 single CPUs left over on 26 of 32 nearly even nodes",
        (
            "20:5 17:8 21:8 22:8 16:9 26:9 23:10 30:10 25:11 28:11 29:12 24:13 27:13 31:13 19:14"
            " 18:17",
            "0:8 14:8 3:9 4:9 5:10 9:10 6:11 10:11 11:11 12:11 1:12 2:12 7:12 8:12 13:13 15:13",
        ),
        count=256,
        group_size=1,
        k=26,
        expected=Plan(
            combo=(
                16,
                26,
                23,
                30,
                25,
                28,
                29,
                24,
                27,
                31,
                19,
                18,
                3,
                4,
                5,
                9,
                6,
                10,
                11,
                12,
                1,
                2,
                7,
                8,
                13,
                15,
            ),
            remainder_numas=(23, 24, 27, 31, 19, 18, 1, 13, 15),
            share=9,
            balance=2.577,
        ),
    ),
    Case(
        "24 pairs left over on 26 of 31 nodes, most with one pair or none",
        (
            "12:1 14:2 15:2 0:3 4:3 6:3 7:3 9:3 13:3 5:4 10:4 2:6 8:6 11:9 1:11",
            "21:1 31:1 17:2 20:2 19:3 25:3 22:4 26:4 28:5 18:7 24:7 27:7 16:8 30:9 23:11 29:13",
        ),
        count=100,
        group_size=2,
        k=26,
        expected=Plan(
            combo=(
                14,
                15,
                0,
                4,
                6,
                7,
                9,
                13,
                5,
                10,
                2,
                8,
                11,
                1,
                19,
                25,
                22,
                26,
                28,
                18,
                24,
                27,
                16,
                30,
                23,
                29,
            ),
            remainder_numas=(11, 1, 18, 24, 27, 16, 30, 23, 29),
            share=2,
            balance=1.183,
        ),
    ),
    Case(
        "16 single CPUs left over on 23 of 32 nodes",
        (
            "26:5 24:6 30:6 22:7 31:7 17:8 27:8 29:8 16:9 20:9 28:9 25:10 18:11 19:11 23:12 21:13",
            "11:4 13:5 9:7 14:7 0:8 1:8 8:8 12:8 3:10 6:10 7:10 10:10 4:11 5:11 2:13 15:14",
        ),
        count=200,
        group_size=1,
        k=23,
        expected=Plan(
            combo=(
                17,
                27,
                29,
                16,
                20,
                28,
                25,
                18,
                19,
                23,
                21,
                0,
                1,
                8,
                12,
                3,
                6,
                7,
                10,
                4,
                5,
                2,
                15,
            ),
            remainder_numas=(18, 19, 23, 21, 4, 5, 2, 15),
            share=8,
            balance=2.396,
        ),
    ),
    Case(
        "4 single CPUs left over on 17 of 25 nodes, a third of them with one CPU or two",
        (
            "3:1 10:1 5:2 0:3 1:3 11:4 15:4 14:5 12:6 8:7 2:8 7:8",
            "18:1 31:1 21:2 24:2 23:3 26:3 27:3 29:3 30:3 16:5 22:5 20:9 19:12",
        ),
        count=65,
        group_size=1,
        k=17,
        expected=Plan(
            combo=(0, 1, 11, 15, 14, 12, 8, 2, 7, 23, 26, 27, 29, 16, 22, 20, 19),
            remainder_numas=(2, 7, 20, 19),
            share=3,
            balance=1.416,
        ),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_slowest_benchmark_shapes_choose_what_the_previous_walk_chose(case: Case) -> None:
    """Where the previous walk took up to 90 ms: the same combination, remainder nodes and
    balance."""
    problem = case.problem()
    assert previous_plan(problem) == case.expected
    numas = list(problem.numas)
    assert best_plan(numas, problem.free, case.count, case.group_size, case.k) == case.expected


# ---- random plans --------------------------------------------------------------------------


@st.composite
def nearly_exhausted_problems(draw: st.DrawFn) -> Problem:
    """Up to 32 NUMA nodes in the socket-first order of two sockets (each sorted by free CPUs),
    sometimes one sorted run or any order, free CPUs around the even share of a k-node request:
    some cannot give the share, some give it and are out of whole groups, most keep a few
    groups, and the request leaves up to k - 1 groups over."""
    nodes = draw(st.one_of(st.integers(2, 12), st.integers(16, 32)))
    size = draw(st.sampled_from([1, 1, 2, 2, 3, 4]))
    k = draw(st.integers(max(1, nodes // 2), nodes))
    share = size * draw(st.integers(1, 10))
    free: dict[int, int] = {}
    for numa in range(nodes):
        kind = draw(st.sampled_from(["poor", "giver", "rich", "rich", "rich"]))
        if kind == "poor":
            free[numa] = draw(st.integers(1, max(share - 1, 1)))
        elif kind == "giver":
            free[numa] = share + draw(st.integers(0, size - 1))
        else:
            free[numa] = share + size * draw(st.integers(1, 5)) + draw(st.integers(0, size - 1))
    layout = draw(st.sampled_from(["two sockets", "two sockets", "one run", "any"]))
    if layout == "two sockets":
        half = draw(st.integers(0, nodes))
        order = tuple(
            n
            for part in (range(half), range(half, nodes))
            for n in sorted(part, key=lambda n: (free[n], n))
        )
    elif layout == "one run":
        order = tuple(sorted(free, key=lambda n: (free[n], n)))
    else:
        order = tuple(draw(st.permutations(range(nodes))))
    over = draw(st.integers(max(0, k // 2), max(k - 1, 0)))
    count = share * k + size * over
    return Problem(order, free, min(count, sum(free.values()) // size * size) or size, size, k)


@SETTINGS
@given(problem=nearly_exhausted_problems())
def test_plan_is_the_previous_walks_plan(problem: Problem) -> None:
    """For any number k of NUMA nodes: the same combination, remainder nodes and balance, or
    none when no k nodes can hold the request."""
    expected = previous_plan(problem)
    got = best_plan(list(problem.numas), problem.free, problem.count, problem.group_size, problem.k)
    assert got == expected


# ---- random machines, end to end ------------------------------------------------------------


@st.composite
def nearly_exhausted_machines(draw: st.DrawFn) -> tuple[Machine, CPUSet]:
    """Two sockets of up to 16 NUMA nodes each, of up to 16 cores, SMT or not (half the time
    the benchmark's machine), siblings adjacent or at cpu + N, and free CPUs that leave most
    NUMA nodes nearly exhausted (each busy by its own fraction above a common floor, or all
    by one)."""
    if draw(st.booleans()):  # the benchmark's: 1,024 CPUs in 32 NUMA nodes
        per_socket, cores_per_numa, threads = 16, 16, 2
    else:
        per_socket = draw(st.sampled_from([1, 2, 4, 8, 16]))
        cores_per_numa = draw(st.sampled_from([2, 3, 4, 8, 16]))
        threads = draw(st.sampled_from([1, 2]))
    adjacent = draw(st.booleans())
    numas = 2 * per_socket
    cores = numas * cores_per_numa
    cpus = [
        CPUInfo(
            cpu_id=core * threads + t if adjacent else core + t * cores,
            core_id=core % (cores // 2),
            socket_id=core // (cores // 2),
            numa_node_id=core // cores_per_numa,
            uncore_cache_id=core // cores_per_numa,
        )
        for core in range(cores)
        for t in range(threads)
    ]
    floor = draw(st.floats(0.3, 0.95))
    if draw(st.booleans()):
        busy = {n: draw(st.floats(floor, 1.0)) for n in range(numas)}
    else:
        busy = dict.fromkeys(range(numas), floor)
    # Which CPUs are busy: drawn from a seed, a list of a thousand draws shrinks poorly.
    chance = random.Random(draw(st.integers(0, 2**32)))
    free = CPUSet(cpu.cpu_id for cpu in cpus if chance.random() >= busy[cpu.numa_node_id])
    return Machine.build(cpus), free


def previous_best_plan(
    numas: list[int], free: dict[int, int], count: int, group_size: int, k: int
) -> Plan | None:
    return previous_plan(Problem(tuple(numas), free, count, group_size, k))


def previous_take_in_numa(
    index: object, free: int, numa: int, count: int, strategy: str = "packed"
) -> int | None:
    return take_packed(index, free, count, strategy, align_uncore=False)  # type: ignore[arg-type]


@SETTINGS
@given(
    request=nearly_exhausted_machines(),
    group_size=st.sampled_from([1, 1, 2, 4]),
    strategy=st.sampled_from(["packed", "packed", "spread"]),
    wanted=st.one_of(
        st.sampled_from([2, 4, 8, 16, 32, 62, 64, 100, 128, 200, 256]), st.floats(0, 1)
    ),
)
def test_distributed_take_is_the_previous_walks_take(
    request: tuple[Machine, CPUSet], group_size: int, strategy: str, wanted: float
) -> None:
    """`take_cpus` with DistributeCPUsAcrossNUMA hands out the same CPUs (or fails the same
    way) as it did with the previous walk and the previous per-node take: a count of the
    benchmark's, or a share of the free CPUs, in whole groups."""
    machine, free = request
    count = int(wanted * len(free)) if isinstance(wanted, float) else min(wanted, len(free))
    count = max(group_size, count // group_size * group_size)
    policy = Policy(strategy=strategy, distribute_numa=True, group_size=group_size)  # type: ignore[arg-type]
    got = _take(machine, free, count, policy)
    with (
        mock.patch.object(distributed, "best_plan", previous_best_plan),
        mock.patch.object(distributed, "take_packed_in_numa", previous_take_in_numa),
    ):
        expected = _take(machine, free, count, policy)
    assert got == expected


def _take(machine: Machine, free: CPUSet, count: int, policy: Policy) -> CPUSet | str:
    try:
        return take_cpus(machine, free, count, policy)
    except InsufficientCPUsError as exc:
        return str(exc)


# ---- the building blocks ---------------------------------------------------------------------


@SETTINGS
@given(request=nearly_exhausted_machines(), data=st.data())
def test_take_inside_one_numa_node_is_the_packed_take(
    request: tuple[Machine, CPUSet], data: st.DataObject
) -> None:
    """For free CPUs inside one NUMA node, `take_packed_in_numa` is `take_packed` without
    uncore alignment, whichever strategy and count."""
    machine, free = request
    index = index_for(machine)
    numa = data.draw(st.sampled_from(sorted(index.numa_masks)))
    inside = free.mask & index.numa_masks[numa]
    count = data.draw(st.integers(1, index.numa_masks[numa].bit_count()))
    strategy = data.draw(st.sampled_from(["packed", "spread"]))
    expected = take_packed(index, inside, count, strategy, align_uncore=False)
    assert take_packed_in_numa(index, inside, numa, count, strategy) == expected


@SETTINGS
@given(request=nearly_exhausted_machines(), data=st.data())
def test_a_numa_nodes_local_numbering_keeps_its_cpus_in_order(
    request: tuple[Machine, CPUSet], data: st.DataObject
) -> None:
    """A NUMA node's local numbering numbers its CPUs 0, 1, ... in ascending id order: any set
    of its CPUs maps back to itself, the k-th lowest CPU to bit k, and each core's local mask
    is its CPUs' local numbers."""
    machine, free = request
    index = index_for(machine)
    numa = data.draw(st.sampled_from(sorted(index.numa_masks)))
    runs = index.numa_runs[numa]  # these machines number each node in at most two runs
    node = index.numa_masks[numa]
    inside = free.mask & node
    local = local_mask(inside, runs)
    assert global_mask(local, runs) == inside
    ids = CPUSet.from_mask(node).sorted()
    assert CPUSet.from_mask(local).sorted() == [ids.index(c) for c in CPUSet.from_mask(inside)]
    for (mask, size), (mine, local_size) in zip(
        index.numa_core_masks[numa], index.numa_local_cores[numa], strict=True
    ):
        assert global_mask(mine, runs) == mask & node
        assert local_size == size


@settings(max_examples=200, deadline=None)
@given(frees=st.lists(st.integers(0, 40), max_size=33), share=st.integers(0, 40))
def test_the_walks_pools_are_the_fullest_nodes_from_each_start(
    frees: list[int], share: int
) -> None:
    """From each start position on, the free counts that can give the share, largest first."""
    expected = [
        sorted((f for f in frees[start:] if f >= share), reverse=True)
        for start in range(len(frees) + 1)
    ]
    assert numa_plan._pools(frees, share) == expected


def test_an_interleaved_numa_node_takes_with_machine_wide_masks() -> None:
    """A node whose CPU ids alternate with another's forms too many runs for a local numbering;
    its take is still the packed take."""
    cpus = [
        CPUInfo(cpu_id=cpu, core_id=cpu // 2, socket_id=0, numa_node_id=cpu % 2, uncore_cache_id=0)
        for cpu in range(4 * MAX_LOCAL_RUNS)
    ]
    index = index_for(Machine.build(cpus))
    assert index.numa_runs == {}
    free = index.numa_masks[1] & ~0b10
    for count in range(1, free.bit_count() + 1):
        expected = take_packed(index, free, count, "packed", align_uncore=False)
        assert take_packed_in_numa(index, free, 1, count) == expected


@settings(max_examples=300, deadline=None)
@given(
    values=st.lists(st.integers(1, 14), min_size=1, max_size=9),
    size=st.sampled_from([1, 1, 2, 3, 4]),
    sorted_runs=st.booleans(),
    data=st.data(),
)
def test_least_squares_of_each_size_are_those_of_its_best_subset(
    values: list[int], size: int, sorted_runs: bool, data: st.DataObject
) -> None:
    """`most_relief` is, for each subset size, the most any subset of that size (holding the
    groups) lowers the sum of squares by upstream's round-robin deal, over all subsets and
    over those whose deal has each number of full rounds; `relief_bound` is never below the
    most of any size."""
    values = [v for v in values if v >= size] or [size]
    if sorted_runs:  # the walk's order: sorted inside each socket
        half = data.draw(st.integers(0, len(values)))
        values = sorted(values[:half]) + sorted(values[half:])
    caps = [v // size for v in values]
    groups = data.draw(st.integers(1, sum(caps)))
    top = max(caps)
    by_size = [-math.inf] * (len(values) + 1)
    by_rounds = [[-math.inf] * (len(values) + 1) for _ in range(top + 1)]
    for length in range(1, len(values) + 1):
        for picks in combinations(range(len(values)), length):
            held = [caps[i] for i in picks]
            if sum(held) < groups:
                continue
            dealt = deal(held, groups)
            relief = sum(
                values[i] ** 2 - (values[i] - t * size) ** 2
                for i, t in zip(picks, dealt, strict=True)
            )
            rounds = _full_rounds(held, groups, top)
            by_size[length] = max(by_size[length], relief)
            by_rounds[rounds][length] = max(by_rounds[rounds][length], relief)
    relief = most_relief(values, groups, size)
    assert relief.by_size == by_size
    for rounds, row in enumerate(by_rounds):  # every subset counted where its rounds say
        assert all(r <= m for r, m in zip(row, relief.by_rounds[rounds], strict=True))
    assert relief_bound(values, groups, size) >= max(by_size)


def _full_rounds(held: list[int], groups: int, top: int) -> int:
    """The full rounds of upstream's deal, or `top` (the most groups any node holds) when
    every member runs out: how `most_relief` counts those subsets."""
    rounds, active = 0, [cap for cap in held if cap > 0]
    while active and groups >= len(active):
        groups -= len(active)
        rounds += 1
        active = [cap for cap in active if cap > rounds]
    return rounds if active else top


# ---- the previous walk (commit 57d4b7b), the oracle ------------------------------------------

_Scorer = Callable[[tuple[int, ...], list[int]], float]
_Best = tuple[float, float, tuple[int, ...]]


def _previous_deal(caps: list[int], groups: int) -> list[int]:
    active = [i for i, cap in enumerate(caps) if cap > 0]
    rounds = 0
    while active and groups >= len(active):
        groups -= len(active)
        rounds += 1
        active = [i for i in active if caps[i] > rounds]
    dealt = [min(cap, rounds) for cap in caps]
    for i in active[:groups]:
        dealt[i] += 1
    return dealt


def _previous_least_squares(values: list[int], groups: int, size: int) -> float:
    heap = [-v for v in values]
    heapq.heapify(heap)
    for _ in range(groups):
        largest = -heap[0]
        if largest < size:
            return math.inf
        heapq.heapreplace(heap, size - largest)
    return float(sum(v * v for v in heap))


def _previous_remainder(
    values: list[int], groups: int, size: int, base: int, ceiling: float, score: _Scorer
) -> _Best:
    return _PreviousSearch(values, groups, size, base, ceiling, score).run()


class _PreviousSearch:
    def __init__(
        self,
        values: list[int],
        groups: int,
        size: int,
        base: int,
        ceiling: float,
        score: _Scorer,
    ) -> None:
        self.values = values
        self.caps = [v // size for v in values]
        self.groups = groups
        self.size = size
        self.base = base
        self.ceiling = ceiling
        self.score = score
        self.best: _Best = (math.inf, math.inf, ())
        count = len(values)
        self.twin = [j > 0 and values[j] == values[j - 1] for j in range(count)]
        self.suffixes = [sorted(values[start:], reverse=True) for start in range(count + 1)]
        self.least_caps = [min(self.caps[start:], default=0) for start in range(count + 1)]

    @property
    def limit(self) -> float:
        return min(self.best[1], self.ceiling)

    def run(self) -> _Best:
        values, groups, size = self.values, self.groups, self.size
        squares = sum(v * v for v in values)
        floor = self.base - squares + _previous_least_squares(values, groups, size)
        smallest_cap = min(self.caps, default=0)
        for length in range(len(values), 0, -1):
            if self.best[1] <= floor:
                break
            if length >= groups or smallest_cap >= -(-groups // length):
                self._ranked(length)
            else:
                self._relaxed(length)
        return self.best

    def _offer(self, picks: tuple[int, ...], dealt: list[int], squares: int) -> None:
        if squares >= self.limit:
            return
        balance = self.score(picks, dealt)
        if balance < self.best[0]:
            self.best = (balance, float(squares), picks)
        elif balance == self.best[0]:
            self.best = (balance, float(squares), self.best[2])

    def _ranked(self, length: int) -> None:
        values, size, count = self.values, self.size, len(self.values)
        groups = self.groups
        amounts = [
            groups // length + (1 if rank < groups % length else 0) for rank in range(length)
        ]
        relief = [[v * v - (v - a * size) ** 2 for a in amounts] for v in values]
        most = [[-math.inf] * (length + 1) for _ in range(count + 1)]
        most[count][0] = 0
        for j in range(count - 1, -1, -1):
            row, below = most[j], most[j + 1]
            row[0] = 0
            rel = relief[j]
            for r in range(1, min(length, count - j) + 1):
                take = rel[length - r] + below[r - 1]
                row[r] = take if take > below[r] else below[r]
        if self.base - most[0][length] >= self.limit:
            return
        chosen: list[int] = []
        twin = self.twin

        def visit(start: int, gained: float) -> None:
            rank = len(chosen)
            missing = length - rank
            if missing == 0:
                dealt = [amounts[r] for r in range(length)]
                self._offer(tuple(chosen), dealt, self.base - int(gained))
                return
            for j in range(start, count - missing + 1):
                if j > start and twin[j]:
                    continue
                step = relief[j][rank]
                if self.base - (gained + step + most[j + 1][missing - 1]) >= self.limit:
                    continue
                chosen.append(j)
                visit(j + 1, gained + step)
                chosen.pop()

        visit(0, 0)

    def _relaxed(self, length: int) -> None:
        values, caps, groups, count = self.values, self.caps, self.groups, len(self.values)
        share, short = groups // length, -(-groups // length)
        lowest = [cap if cap < short else share for cap in caps]
        chosen: list[int] = []
        twin = self.twin

        def visit(start: int) -> None:
            missing = length - len(chosen)
            if missing == 0:
                held = [caps[i] for i in chosen]
                if sum(held) < groups:
                    return
                dealt = _previous_deal(held, groups)
                squares = self.base - sum(
                    values[i] ** 2 - (values[i] - t * self.size) ** 2
                    for i, t in zip(chosen, dealt, strict=True)
                )
                self._offer(tuple(chosen), dealt, squares)
                return
            for j in range(start, count - missing + 1):
                if j > start and twin[j]:
                    continue
                chosen.append(j)
                if missing == 1 or self._bound(chosen, lowest, j + 1, missing - 1) < self.limit:
                    visit(j + 1)
                chosen.pop()

        if self._bound([], lowest, 0, length) < self.limit:
            visit(0)

    def _bound(self, chosen: list[int], lowest: list[int], start: int, missing: int) -> float:
        size, groups, values, caps = self.size, self.groups, self.values, self.caps
        held = sorted(caps[i] for i in chosen)
        fewest = self.least_caps[start]
        most, needed, below = 1, 1, 0
        while most < groups:
            while below < len(held) and held[below] < most:
                below += 1
            needed += len(held) - below + (missing if fewest >= most else 0)
            if needed > groups:
                break
            most += 1
        members = [(values[i], lowest[i], min(caps[i], most)) for i in chosen]
        members += [(v, 1, min(v // size, most)) for v in self.suffixes[start][:missing]]
        spare = groups
        relief = 0
        heap: list[tuple[int, int]] = []
        for value, least, cap in members:
            if least > cap:
                return math.inf
            spare -= least
            rest = value - least * size
            relief += value * value - rest * rest
            if cap > least:
                heap.append((-rest, cap - least))
        if spare < 0:
            return math.inf
        heapq.heapify(heap)
        while spare > 0:
            if not heap:
                return math.inf
            negative, room = heap[0]
            rest = -negative
            relief += rest * rest - (rest - size) ** 2
            spare -= 1
            if room > 1:
                heapq.heapreplace(heap, (size - rest, room - 1))
            else:
                heapq.heappop(heap)
        return self.base - relief


def _previous_subset(
    problem: Problem, combo: tuple[int, ...], left: dict[int, int], ceiling: float
) -> tuple[float, float, tuple[int, ...]]:
    size = problem.group_size
    groups = problem.remainder // size
    ordered_ids = sorted(left)
    if groups == 0:
        ordered = [left[n] for n in ordered_ids]
        return standard_deviation(ordered), sum(v * v for v in ordered), ()
    candidates = [n for n in combo if left[n] >= size]
    base = sum(v * v for v in left.values())

    def score(picks: tuple[int, ...], dealt: list[int]) -> float:
        final = dict(left)
        for i, taken in zip(picks, dealt, strict=True):
            final[candidates[i]] -= taken * size
        return standard_deviation([final[n] for n in ordered_ids])

    values = [left[n] for n in candidates]
    ceiling = min(ceiling, _previous_subset_seed(problem, candidates, left))
    balance, squares, picks = _previous_remainder(values, groups, size, base, ceiling, score)
    return balance, squares, tuple(candidates[i] for i in picks)


def _previous_deviation(values: list[int]) -> float:
    average = mean(values)
    return math.sqrt(sum((v - average) * (v - average) for v in values) / len(values))


class _PreviousWalk:
    def __init__(self, problem: Problem) -> None:
        self.problem = problem
        self.order = problem.numas
        self.twin = [
            p > 0 and problem.free[n] == problem.free[self.order[p - 1]]
            for p, n in enumerate(self.order)
        ]
        self.squares_all = sum(v * v for v in problem.free.values())
        self.best: Plan | None = None
        self.best_squares: float = math.inf
        self.hopeless: float = math.inf
        self.seeded: tuple[tuple[int, ...], tuple[float, float, tuple[int, ...]]] | None = None

    def run(self) -> Plan | None:
        self._seed()
        self._visit([], 0)
        return self.best

    def _seed(self) -> None:
        problem = self.problem
        ranked = sorted(
            (n for n in self.order if problem.free[n] >= problem.share),
            key=lambda n: -problem.free[n],
        )
        combo = tuple(n for n in self.order if n in set(ranked[: problem.k]))
        if len(combo) < problem.k or not problem.acceptable(combo):
            return
        left = problem.left_after_share(combo)
        scored = _previous_subset(problem, combo, left, math.inf)
        balance, squares, subset = scored
        if balance == math.inf:
            return
        self.seeded = (combo, scored)
        final = _previous_dealt(problem, left, subset)
        values = [final[n] for n in sorted(final)]
        self.hopeless = _previous_tie_limit(
            squares, balance, _previous_deviation(values), len(values)
        )

    def _visit(self, chosen: list[int], start: int) -> None:
        problem = self.problem
        missing = problem.k - len(chosen)
        if missing == 0:
            self._score(tuple(chosen))
            return
        for position in range(start, len(self.order) - missing + 1):
            numa = self.order[position]
            if problem.free[numa] < problem.share:
                continue
            if position > start and self.twin[position]:
                continue
            chosen.append(numa)
            if self._bound(chosen, position + 1) < min(self.best_squares, self.hopeless):
                self._visit(chosen, position + 1)
            chosen.pop()

    def _bound(self, chosen: list[int], start: int) -> float:
        problem = self.problem
        free, size, share = problem.free, problem.group_size, problem.share
        missing = problem.k - len(chosen)
        pool = sorted((free[n] for n in self.order[start:] if free[n] >= share), reverse=True)
        if len(pool) < missing:
            return math.inf
        picked = [free[n] for n in chosen] + pool[:missing]
        pool_groups = sorted((f // size for f in pool), reverse=True)
        most_groups = sum(free[n] // size for n in chosen) + sum(pool_groups[:missing])
        if most_groups * size < problem.count:
            return math.inf
        outside = self.squares_all - sum(f * f for f in picked)
        left = [f - share for f in picked]
        return outside + _previous_least_squares(left, problem.remainder // size, size)

    def _score(self, combo: tuple[int, ...]) -> None:
        problem = self.problem
        if self.best is not None and self.best.balance == 0:
            return
        if not problem.acceptable(combo):
            return
        left = problem.left_after_share(combo)
        if self.seeded is not None and self.seeded[0] == combo:
            balance, squares, subset = self.seeded[1]
        else:
            ceiling = min(self.best_squares, self.hopeless)
            balance, squares, subset = _previous_subset(problem, combo, left, ceiling)
        if self.best is None or balance < self.best.balance:
            self.best = Plan(combo, subset, problem.share, balance)
            self.best_squares = squares


def _previous_subset_seed(problem: Problem, candidates: list[int], left: dict[int, int]) -> float:
    size = problem.group_size
    groups = problem.remainder // size
    fullest = sorted(range(len(candidates)), key=lambda i: -left[candidates[i]])
    best_squares, best_balance, best_deviation = math.inf, math.inf, 0.0
    for length in range(1, len(candidates) + 1):
        subset = tuple(candidates[i] for i in sorted(fullest[:length]))
        if sum(left[n] // size for n in subset) < groups:
            continue
        final = _previous_dealt(problem, left, subset)
        squares = sum(v * v for v in final.values())
        if squares < best_squares:
            values = [final[n] for n in sorted(final)]
            best_squares = squares
            best_balance, best_deviation = standard_deviation(values), _previous_deviation(values)
    if best_squares == math.inf:
        return math.inf
    return _previous_tie_limit(best_squares, best_balance, best_deviation, len(left))


def _previous_dealt(
    problem: Problem, left: dict[int, int], subset: tuple[int, ...]
) -> dict[int, int]:
    size = problem.group_size
    final = dict(left)
    taken = _previous_deal([left[n] // size for n in subset], problem.remainder // size)
    for numa, groups in zip(subset, taken, strict=True):
        final[numa] -= groups * size
    return final


def _previous_tie_limit(squares: float, balance: float, deviation: float, nodes: int) -> float:
    return squares + nodes * ((balance + 0.0005) ** 2 - deviation**2) + 2


def previous_plan(problem: Problem) -> Plan | None:
    return _PreviousWalk(problem).run()
