"""The NUMA-distributed take: the kubelet's `takeByTopologyNUMADistributed` (KEP-2902,
DistributeCPUsAcrossNUMA with a CPU group size).

For k = the fewest NUMA nodes that could hold the request up to the most that are useful, try
every k-combination of the available NUMA nodes (in the packed NUMA order): each gets an even
share in whole groups, and the remainder groups go to the subset of the combination that
leaves the free CPUs of all NUMA nodes most balanced (lowest standard deviation). The first k
with a feasible combination wins; if none is feasible, fall back to the packed take.

Unlike upstream: availability is checked in whole groups (upstream checks CPUs, then loops
forever when the CPUs suffice but whole groups do not); the combination and remainder subset
that scored best are the ones allocated from (upstream's reused slices can be overwritten by
later combinations); the balance is summed in ascending NUMA id order.
"""

from __future__ import annotations

import math
from itertools import combinations

from dracpu.allocator.algorithm.accumulator import Accumulator
from dracpu.allocator.algorithm.balance import standard_deviation
from dracpu.allocator.algorithm.packed import Strategy, take_packed
from dracpu.allocator.algorithm.topology_index import TopologyIndex


class _Plan:
    """The chosen NUMA combination and the subset that takes the remainder groups."""

    __slots__ = ("balance", "combo", "remainder_numas")

    def __init__(self) -> None:
        self.balance = math.inf
        self.combo: tuple[int, ...] = ()
        self.remainder_numas: tuple[int, ...] = ()


def take_distributed(
    index: TopologyIndex,
    free: int,
    count: int,
    group_size: int,
    strategy: Strategy = "packed",
) -> int | None:
    """The mask of `count` CPUs spread evenly over NUMA nodes in groups of `group_size`, or
    None when `free` holds fewer than `count` CPUs."""
    # A request that is not a whole number of groups cannot be distributed in groups.
    if count % group_size != 0:
        return take_packed(index, free, count, strategy, align_uncore=False)
    acc = Accumulator(index, free & index.all_cpus, count)
    if acc.satisfied:
        return acc.result
    if acc.failed:
        return None
    numas = acc.sorted_numa_nodes()
    free_counts = {n: acc.free_in(index.numa_masks[n]) for n in numas}
    lowest, highest = _numa_count_range(index, len(numas), count, group_size)
    for k in range(lowest, highest + 1):
        plan = _best_plan(numas, free_counts, count, group_size, k)
        if plan is None:
            continue
        _allocate(acc, plan, count, group_size, strategy)
        return acc.result if acc.needed == 0 else None
    return take_packed(index, acc.free, count, strategy, align_uncore=False)


def _numa_count_range(
    index: TopologyIndex, available_numas: int, count: int, group_size: int
) -> tuple[int, int]:
    """`rangeNUMANodesNeededToSatisfy`: the fewest NUMA nodes whose share of the machine's
    groups covers the request, and at most one NUMA node per needed group."""
    groups_total = (index.cpu_count - 1) // group_size + 1
    groups_per_numa = (groups_total - 1) // len(index.numa_masks) + 1
    groups_needed = (count - 1) // group_size + 1
    return (groups_needed - 1) // groups_per_numa + 1, min(groups_needed, available_numas)


def _best_plan(
    numas: list[int], free_counts: dict[int, int], count: int, group_size: int, k: int
) -> _Plan | None:
    ordered = sorted(numas)
    position = {numa: i for i, numa in enumerate(ordered)}
    baseline = [free_counts[n] for n in ordered]
    best = _Plan()
    for combo in combinations(numas, k):
        # A perfectly balanced combination cannot be beaten; keep the first one.
        if best.balance == 0:
            break
        if sum(free_counts[n] for n in combo) < count:
            continue
        if sum(free_counts[n] // group_size for n in combo) * group_size < count:
            continue
        share = (count // k // group_size) * group_size
        if any(free_counts[n] < share for n in combo):
            continue
        after = list(baseline)
        for numa in combo:
            after[position[numa]] -= share
        remainder = count - share * k
        balance, subset = _best_remainder(combo, after, position, remainder, group_size)
        if balance < best.balance:
            best.balance, best.combo, best.remainder_numas = balance, combo, subset
    return best if best.combo else None


def _best_remainder(
    combo: tuple[int, ...],
    after: list[int],
    position: dict[int, int],
    remainder: int,
    group_size: int,
) -> tuple[float, tuple[int, ...]]:
    if remainder == 0:
        return standard_deviation(after), ()
    candidates = [n for n in combo if after[position[n]] >= group_size]
    best_balance = math.inf
    best_subset: tuple[int, ...] = ()
    # Larger subsets first, so the remainder spreads over as many NUMA nodes as possible.
    for size in range(len(candidates), 0, -1):
        for subset in combinations(candidates, size):
            whole_groups = sum(after[position[n]] // group_size for n in subset)
            if whole_groups * group_size < remainder:
                continue
            trial = list(after)
            _deal_groups(subset, trial, position, remainder, group_size)
            balance = standard_deviation(trial)
            if balance < best_balance:
                best_balance, best_subset = balance, subset
    return best_balance, best_subset


def _deal_groups(
    subset: tuple[int, ...], free: list[int], position: dict[int, int], left: int, size: int
) -> None:
    """Hand out `left` CPUs one group at a time, round-robin over `subset` (enough whole
    groups were checked to exist, so this ends)."""
    while left > 0:
        for numa in subset:
            if left == 0:
                break
            if free[position[numa]] < size:
                continue
            free[position[numa]] -= size
            left -= size


def _allocate(
    acc: Accumulator, plan: _Plan, count: int, group_size: int, strategy: Strategy
) -> None:
    index = acc.index
    share = (count // len(plan.combo) // group_size) * group_size
    for numa in plan.combo:
        _take_from_numa(acc, numa, share, strategy)
    left = count - share * len(plan.combo)
    while left > 0:
        progressed = False
        for numa in plan.remainder_numas:
            if left == 0:
                break
            if acc.free_in(index.numa_masks[numa]) < group_size:
                continue
            _take_from_numa(acc, numa, group_size, strategy)
            left -= group_size
            progressed = True
        if not progressed:
            return


def _take_from_numa(acc: Accumulator, numa: int, count: int, strategy: Strategy) -> None:
    taken = take_packed(
        acc.index, acc.free & acc.index.numa_masks[numa], count, strategy, align_uncore=False
    )
    if taken is not None:
        acc.take(taken)
