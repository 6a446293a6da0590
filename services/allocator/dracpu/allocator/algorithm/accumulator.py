"""The free-CPU state of one allocation and the kubelet's orderings over it.

Mirrors `cpuAccumulator` in kubernetes pkg/kubelet/cm/cpumanager/cpu_assignment.go: groups are
visited by ascending number of free CPUs, ties by ascending id, nested NUMA-then-socket (or
socket-then-NUMA when a socket holds several NUMA nodes). Lists are de-duplicated: a group
reachable through two parents is visited once, at its first position.
"""

from __future__ import annotations

from collections.abc import Sequence

from dracpu.allocator.algorithm.topology_index import TopologyIndex

# Room for the position of any group, or any core id, in a sort key (far more than any machine
# has).
_POSITION_BITS = 32
_POSITION_MASK = (1 << _POSITION_BITS) - 1


class Accumulator:
    """CPUs still free (`free`), CPUs taken so far (`result`) and how many are still needed."""

    __slots__ = ("free", "index", "needed", "result")

    def __init__(self, index: TopologyIndex, free: int, needed: int) -> None:
        self.index = index
        self.free = free
        self.result = 0
        self.needed = needed

    # ---- state ---------------------------------------------------------------------------

    def take(self, mask: int) -> None:
        # Intersecting with `free` keeps the answer inside the available set whatever the
        # caller computed, and counts every CPU once.
        mask &= self.free
        self.result |= mask
        self.free &= ~mask
        self.needed -= mask.bit_count()

    @property
    def satisfied(self) -> bool:
        return self.needed < 1

    @property
    def failed(self) -> bool:
        return self.needed > self.free.bit_count()

    def free_in(self, mask: int) -> int:
        return (self.free & mask).bit_count()

    # ---- orderings (sortAvailable*) ------------------------------------------------------

    def _by_free(self, ids: Sequence[int], masks: dict[int, int]) -> list[int]:
        """`ids` (ascending) by free CPUs, then id."""
        if len(ids) == 1:
            return [ids[0]]  # the socket of a NUMA node, or the other way round: nothing to count
        free = self.free
        # With the ids ascending, (free CPUs, position) orders them as (free CPUs, id) does,
        # and packs into one int: a sort of plain ints, without a key function or tuples.
        keys = [(free & masks[i]).bit_count() << _POSITION_BITS | p for p, i in enumerate(ids)]
        keys.sort()
        return [ids[key & _POSITION_MASK] for key in keys]

    def _present_by_free(self, masks: dict[int, int]) -> list[int]:
        """The groups of `masks` (by ascending id) with free CPUs, by free CPUs, then id: each
        group's free CPUs counted once, for the test and the sort."""
        free = self.free
        ids = list(masks)
        keys = []
        for position, mask in enumerate(masks.values()):
            n = (free & mask).bit_count()
            if n:
                keys.append(n << _POSITION_BITS | position)
        keys.sort()
        return [ids[key & _POSITION_MASK] for key in keys]

    def sorted_numa_nodes(self) -> list[int]:
        ix = self.index
        only = _only_group(self.free, ix.cpu_numa, ix.numa_masks)
        if only is not None:
            return [only]
        if ix.numa_first:
            return self._present_by_free(ix.numa_masks)
        result: list[int] = []
        for socket in self.sorted_sockets():
            inside = [
                n for n in ix.socket_numas[socket] if self.free & ix.socket_numa_masks[socket, n]
            ]
            result.extend(self._by_free(inside, ix.numa_masks))
        return _unique(result)

    def sorted_sockets(self) -> list[int]:
        ix = self.index
        only = _only_group(self.free, ix.cpu_socket, ix.socket_masks)
        if only is not None:
            return [only]
        if not ix.numa_first:
            return self._present_by_free(ix.socket_masks)
        result: list[int] = []
        for numa in self.sorted_numa_nodes():
            inside = [s for s in ix.numa_sockets[numa] if self.free & ix.socket_numa_masks[s, numa]]
            result.extend(self._by_free(inside, ix.socket_masks))
        return _unique(result)

    def sorted_cores(self, counts: list[int] | None = None) -> list[int]:
        """The cores with free CPUs in the kubelet's order; `counts`: `core_free_counts` of
        `free`, when the caller has them."""
        ix = self.index
        if counts is None:
            counts = ix.core_free_counts(self.free)
        if ix.numa_first:
            parents, members = self.sorted_sockets(), ix.socket_cores
        else:
            parents, members = self.sorted_numa_nodes(), ix.numa_cores
        result: list[int] = []
        for parent in parents:
            # (free CPUs, id) packed into one int (core ids are positions, never negative).
            inside = [counts[c] << _POSITION_BITS | c for c in members[parent] if counts[c]]
            inside.sort()
            result.extend([key & _POSITION_MASK for key in inside])
        return result if ix.cores_partitioned else _unique(result)

    def sorted_uncore_caches(self) -> list[int]:
        ix = self.index
        result: list[int] = []
        for numa in self.sorted_numa_nodes():
            inside = [
                u
                for u in ix.numa_uncores.get(numa, ())
                if self.free & ix.numa_uncore_masks[numa, u]
            ]
            result.extend(self._by_free(inside, ix.uncore_masks))
        return _unique(result)

    def sorted_cpus_packed(self) -> list[int]:
        """Free CPUs core by core in `sorted_cores` order, ascending inside a core."""
        cores = self.index.core_masks
        result: list[int] = []
        for core in self.sorted_cores():
            result.extend(_bits(self.free & cores[core]))
        return result

    def sorted_cpus_spread(self) -> list[int]:
        """Free CPUs socket by socket, ascending by id inside a socket (the kubelet's
        `sortAvailableCPUsSpread`)."""
        sockets = self.index.socket_masks
        result: list[int] = []
        for socket in self.sorted_sockets():
            result.extend(_bits(self.free & sockets[socket]))
        return result


def _only_group(free: int, group_of: dict[int, int], masks: dict[int, int]) -> int | None:
    """The one group holding every free CPU, if there is one (a take inside one NUMA node
    of a distributed take): the ordering of a single group needs no sort."""
    if not free:
        return None
    group = group_of[(free & -free).bit_length() - 1]
    return group if free & ~masks[group] == 0 else None


def _unique(ids: list[int]) -> list[int]:
    return list(dict.fromkeys(ids))


def _bits(mask: int) -> list[int]:
    out: list[int] = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out
