"""The NUMA-distributed take: the kubelet's `takeByTopologyNUMADistributed` (KEP-2902,
DistributeCPUsAcrossNUMA with a CPU group size).

For k = the fewest NUMA nodes that could hold the request up to the most that are useful, try
every k-combination of the available NUMA nodes (in the packed NUMA order): each gets an even
share in whole groups, and the remainder groups go to the subset of the combination that
leaves the free CPUs of all NUMA nodes most balanced (lowest standard deviation). The first k
with a feasible combination wins; if none is feasible, fall back to the packed take.

The combination search is in `numa_plan`. Unlike upstream: availability is checked in whole
groups (upstream checks CPUs, then loops forever when the CPUs suffice but whole groups do
not); the combination and remainder subset that scored best are the ones allocated from
(upstream's reused slices can be overwritten by later combinations); the balance is summed in
ascending NUMA id order.
"""

from __future__ import annotations

from itertools import accumulate

from dracpu.allocator.algorithm.accumulator import Accumulator
from dracpu.allocator.algorithm.numa_plan import Plan, best_plan
from dracpu.allocator.algorithm.packed import Strategy, take_packed, take_packed_in_numa
from dracpu.allocator.algorithm.topology_index import TopologyIndex


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
    # The fullest k nodes are the best k to give an even share and to hold the request in
    # whole groups: when they cannot, no combination of k can, and the search is skipped.
    fullest = sorted(free_counts.values(), reverse=True)
    held = list(accumulate((f // group_size for f in fullest), initial=0))
    for k in range(lowest, highest + 1):
        share = count // k // group_size * group_size
        if fullest[k - 1] < share or held[k] * group_size < count:
            continue
        plan = best_plan(numas, free_counts, count, group_size, k)
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


def _allocate(
    acc: Accumulator, plan: Plan, count: int, group_size: int, strategy: Strategy
) -> None:
    index = acc.index
    for numa in plan.combo:
        _take_from_numa(acc, numa, plan.share, strategy)
    left = count - plan.share * len(plan.combo)
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
    free = acc.free & acc.index.numa_masks[numa]
    taken = take_packed_in_numa(acc.index, free, numa, count, strategy)
    if taken is not None:
        acc.take(taken)
