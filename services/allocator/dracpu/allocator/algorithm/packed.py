"""The NUMA-packed take: the kubelet's `takeByTopologyNUMAPacked` best-fit walk.

Order (kubernetes pkg/kubelet/cm/cpumanager/cpu_assignment.go): whole NUMA nodes and whole
sockets (the larger level first), then whole or partial uncore caches when aligning by uncore
cache, then whole cores (not with the spread strategy), then single CPUs in the strategy's
order. Every "is it free" test compares a group's free CPUs with its actual members.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

from dracpu.allocator.algorithm.accumulator import Accumulator
from dracpu.allocator.algorithm.topology_index import TopologyIndex, global_mask, local_mask

Strategy = Literal["packed", "spread"]
# Sort keys of cores pack (free CPUs, id) into one int: room for any core id.
_ID_BITS = 32
_ID_MASK = (1 << _ID_BITS) - 1
_Step = Callable[[Accumulator], None]


def take_packed(
    index: TopologyIndex,
    free: int,
    count: int,
    strategy: Strategy = "packed",
    align_uncore: bool = True,
) -> int | None:
    """The mask of `count` CPUs out of `free`, or None when `free` holds fewer than `count`."""
    acc = Accumulator(index, free & index.all_cpus, count)
    if acc.satisfied:
        return acc.result
    if acc.failed:
        return None
    for step in _steps(index, strategy, align_uncore):
        step(acc)
        if acc.satisfied:
            return acc.result
    # Unreachable: the single-CPU step alone can always finish when enough CPUs are free.
    return None


def take_packed_in_numa(
    index: TopologyIndex, free: int, numa: int, count: int, strategy: Strategy = "packed"
) -> int | None:
    """`take_packed` without uncore alignment for `free` inside NUMA node `numa`, as the
    distributed take asks for each node: the same answer, from one sort of the node's cores.

    When fewer CPUs are needed than any NUMA node or socket holds, no whole one is taken, and
    when the node lies in one socket, the kubelet's core order inside it is by free CPUs,
    then id (whichever of NUMA node and socket it walks first)."""
    available = free.bit_count()
    if count >= available:
        return free if count == available else None  # all of them, whatever the order
    if (
        count >= index.smallest_numa
        or count >= index.smallest_socket
        or len(index.numa_sockets[numa]) != 1
    ):
        return take_packed(index, free, count, strategy, align_uncore=False)
    if strategy == "spread":
        return _lowest(free, count)
    runs = index.numa_runs.get(numa)
    if runs is None:
        return _packed_in_cores(free, count, index.numa_core_masks[numa])
    # The same walk on the node's local numbering, which keeps the order of the CPU ids.
    local = _packed_in_cores(local_mask(free, runs), count, index.numa_local_cores[numa])
    return global_mask(local, runs)


def _packed_in_cores(free: int, count: int, cores: tuple[tuple[int, int], ...]) -> int:
    """The packed take of `count` CPUs of `free` (fewer than it holds) over `cores`, (mask,
    CPUs) of each core by id: whole cores, then single CPUs, the cores by free CPUs, then id."""
    mines = [free & mask for mask, _ in cores]
    # The cores with free CPUs by free CPUs, then id, as sort keys of plain ints.
    order = [mine.bit_count() << _ID_BITS | i for i, mine in enumerate(mines) if mine]
    order.sort()
    taken, needed = 0, count
    for key in order:  # whole cores, as `take_full_cores`
        n, i = key >> _ID_BITS, key & _ID_MASK
        if n == cores[i][1] and needed >= n:
            taken |= mines[i]
            needed -= n
    # Then single CPUs core by core in the same order (taking whole cores changed no other
    # core's count), as `take_remaining_cpus`.
    for key in order:
        if needed == 0:
            break
        mine = mines[key & _ID_MASK]
        if not mine & taken:
            cpus = _lowest(mine, needed)
            taken |= cpus
            needed -= cpus.bit_count()
    return taken


def _lowest(cpus: int, count: int) -> int:
    """The `count` lowest-numbered CPUs of `cpus` (all of them if fewer)."""
    taken = 0
    while cpus and count > 0:
        lowest = cpus & -cpus
        taken |= lowest
        cpus ^= lowest
        count -= 1
    return taken


def _steps(index: TopologyIndex, strategy: Strategy, align_uncore: bool) -> list[_Step]:
    steps: list[_Step] = (
        [take_full_numa_nodes, take_full_sockets]
        if index.numa_first
        else [take_full_sockets, take_full_numa_nodes]
    )
    if align_uncore:
        steps.append(take_uncore_caches)
    # DistributeCPUsAcrossCores skips whole cores so that threads spread over cores.
    if strategy != "spread":
        steps.append(take_full_cores)
    steps.append(take_remaining_cpus_spread if strategy == "spread" else take_remaining_cpus)
    return steps


def _take_whole_groups(acc: Accumulator, order: list[int], masks: dict[int, int]) -> None:
    # The free groups are chosen before any is taken, as in the kubelet's free*() lists.
    free_groups = [g for g in order if acc.free & masks[g] == masks[g]]
    for group in free_groups:
        mask = masks[group]
        if acc.needed >= mask.bit_count():
            acc.take(mask)


def take_full_numa_nodes(acc: Accumulator) -> None:
    if acc.needed >= acc.index.smallest_numa:
        _take_whole_groups(acc, acc.sorted_numa_nodes(), acc.index.numa_masks)


def take_full_sockets(acc: Accumulator) -> None:
    if acc.needed >= acc.index.smallest_socket:
        _take_whole_groups(acc, acc.sorted_sockets(), acc.index.socket_masks)


def take_full_uncore_caches(acc: Accumulator) -> None:
    if acc.needed >= acc.index.smallest_uncore:
        _take_whole_groups(acc, acc.sorted_uncore_caches(), acc.index.uncore_masks)


def take_partial_uncore_cache(acc: Accumulator, uncore: int) -> None:
    """Claim the lowest-numbered cores of one uncore cache if their free CPUs are exactly
    what is still needed (`takePartialUncore`)."""
    ix = acc.index
    width = ix.smt_width
    cores_needed = -(-acc.needed // width)
    cores = [c for c in ix.uncore_cores[uncore] if acc.free & ix.core_masks[c]][:cores_needed]
    cpus = 0
    for core in cores:
        cpus |= acc.free & ix.core_masks[core]
    # For an odd request on an SMT machine, leave out the highest CPU (one thread of the last
    # core). Only one CPU is trimmed, as upstream: with 4-way SMT, requests of 4k+1 and 4k+2
    # therefore never fit here.
    if acc.needed % 2 != 0 and width > 1 and cpus.bit_count() > acc.needed:
        cpus ^= 1 << (cpus.bit_length() - 1)
    if cpus.bit_count() == acc.needed:
        acc.take(cpus)


def take_uncore_caches(acc: Accumulator) -> None:
    # Upstream retries whole caches before each partial one, gated on the average cache size;
    # only the first try can take anything (the need only shrinks), and each cache is checked
    # against its real size, which is the same on a symmetric machine.
    order = acc.sorted_uncore_caches()
    take_full_uncore_caches(acc)
    if acc.satisfied:
        return
    for uncore in order:
        take_partial_uncore_cache(acc, uncore)
        if acc.satisfied:
            return


def take_full_cores(acc: Accumulator) -> None:
    cores = acc.index.core_masks
    counts = acc.index.core_free_counts(acc.free)
    order = acc.sorted_cores(counts)
    free_cores = [c for c in order if counts[c] == len(acc.index.core_cpus[c])]
    for core in free_cores:
        if acc.needed >= cores[core].bit_count():
            acc.take(cores[core])


def _take_first(acc: Accumulator, order: list[int], masks: Sequence[int] | dict[int, int]) -> None:
    """Take CPUs one by one, group by group in `order` and ascending inside a group, until
    satisfied: the first `needed` CPUs of the kubelet's sorted CPU list."""
    taken, left = 0, acc.needed
    for group in order:
        cpus = acc.free & masks[group]
        while cpus and left > 0:
            lowest = cpus & -cpus
            taken |= lowest
            cpus ^= lowest
            left -= 1
        if left <= 0:
            break
    acc.take(taken)


def take_remaining_cpus(acc: Accumulator) -> None:
    # The order of `sorted_cpus_packed`.
    _take_first(acc, acc.sorted_cores(), acc.index.core_masks)


def take_remaining_cpus_spread(acc: Accumulator) -> None:
    # The order of `sorted_cpus_spread`.
    _take_first(acc, acc.sorted_sockets(), acc.index.socket_masks)
