"""Which NUMA nodes of a chosen combination take the remainder groups of a distributed take.

Upstream tries every subset of the combination's nodes that still hold a whole group, larger
subsets first and each size in combination order, deals the remainder round-robin over the
subset (one group per node per round, skipping nodes that ran out) and keeps the first subset
with the strictly lowest balance. `best_remainder` gives the same subset without scoring all
2^k of them, from two facts about the round-robin deal of G groups over a subset of L nodes:

- every node gets at least one group when L <= G, and when L >= G only the first G nodes of
  the subset get one (each exactly one), whatever they hold;
- a node holding fewer than ceil(G / L) groups is emptied of whole groups, and when no node of
  the subset is that short, the node at rank r gets G // L groups plus one if r < G % L.

When no node is short for a size (always so when L >= G) what a node gives depends only on its
rank, and a small table over (position, rank) bounds every branch of the walk exactly. For the
other sizes the walk is bounded by a relaxation of the deal (each node gives at least its
share and at most what the round-robin can give one node, the rest goes to the fullest nodes).
Subsets are only scored where the bound says the sum of squares of the free counts can still
drop below the best one's: with the total of free CPUs fixed, the balance can only be lower
when that sum is strictly lower. Subsets that only swap a node for an earlier one with the
same free count are skipped: they leave the same counts, so they can only tie.

When the free counts are nearly even, many sizes come within a few units of the best and the
relaxation cannot tell them apart. The exact least sum of squares of every size, and of every
number of full rounds of the deal (`remainder_floor`), then skips the sizes that cannot beat
the best, stops a size once its least is reached, and tells which numbers of full rounds the
walk of a size needs to look at: with the rounds known, each chosen node's share is known
within one group, which bounds a branch much more closely.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from itertools import accumulate

from dracpu.allocator.algorithm.remainder_floor import Relief, Reliefs, most_relief

# Scores one outcome: the positions of the subset and the groups each gives, in subset order.
Scorer = Callable[[tuple[int, ...], list[int]], float]
# A sum of squares -> one at or past which no outcome scores as low as it does.
TieLimit = Callable[[float], float]
Best = tuple[float, float, tuple[int, ...]]  # balance, sum of squares, positions


def deal(caps: list[int], groups: int) -> list[int]:
    """Groups each member gets from upstream's round-robin: one per member per round, in
    order, skipping members without a whole group left (enough whole groups exist)."""
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


def least_squares(values: list[int], groups: int, size: int) -> float:
    """The least sum of squares of `values` after removing `groups` groups of `size`, each
    from any value that still holds a whole group: always from the largest (the sum of
    squares is convex in each value, so this greedy choice is optimal)."""
    heap = [-v for v in values]
    heapq.heapify(heap)
    for _ in range(groups):
        largest = -heap[0]
        if largest < size:
            return math.inf
        heapq.heapreplace(heap, size - largest)
    return float(sum(v * v for v in heap))


def best_remainder(
    values: list[int],
    groups: int,
    size: int,
    base: int,
    ceiling: float,
    score: Scorer,
    reliefs: Reliefs | None = None,
    tie_limit: TieLimit | None = None,
) -> Best:
    """The first subset of positions of `values` (each holding a whole group) in upstream's
    order with the lowest balance, as (balance, sum of squares, positions).

    `base` is the sum of squares of every NUMA node's free CPUs before the remainder is dealt.
    Subsets whose sum of squares is not below `ceiling` are not scored: the caller knows they
    cannot win. Returns infinite scores when nothing below `ceiling` exists. `reliefs` keeps
    what `most_relief` found for each `values`, for a caller that asks again with the same
    values, groups and size (other combinations of the same free counts). `tie_limit`, when
    given, turns the least sum of squares of any subset into one at or past which no subset
    can score as low, so the search looks no further than that from the start.
    """
    return _Search(values, groups, size, base, ceiling, score, reliefs, tie_limit).run()


class _Search:
    def __init__(
        self,
        values: list[int],
        groups: int,
        size: int,
        base: int,
        ceiling: float,
        score: Scorer,
        reliefs: Reliefs | None = None,
        tie_limit: TieLimit | None = None,
    ) -> None:
        self.values = values
        self.tie_limit = tie_limit
        self.caps = [v // size for v in values]
        self.groups = groups
        self.size = size
        self.base = base
        self.ceiling = ceiling
        self.score = score
        self.best: Best = (math.inf, math.inf, ())
        count = len(values)
        # A position holding as many free CPUs as the one before it: a subset that takes it
        # but not that one leaves the same free counts as the earlier subset that swaps them,
        # so it can only tie (ties keep the first) and the walk skips it.
        self.twin = [j > 0 and values[j] == values[j - 1] for j in range(count)]
        self.relaxation = _Relaxation(values, self.caps, groups, size, base)
        # The exact least sum of squares per subset size, computed once a size needs it.
        self.reliefs: Reliefs = {} if reliefs is None else reliefs
        self.relief: Relief | None = None
        self.floors: list[float] | None = None
        self.floors_below: list[float] = []
        key = tuple(values)
        if key in self.reliefs:
            self._set_floors(self.reliefs[key])

    def _floors(self) -> list[float]:
        if self.floors is None:
            relief = most_relief(self.values, self.groups, self.size)
            self.reliefs[tuple(self.values)] = relief
            self._set_floors(relief)
        assert self.floors is not None
        return self.floors

    def _set_floors(self, relief: Relief) -> None:
        self.relief = relief
        self.floors = [self.base - r for r in relief.by_size]
        # floors_below[L]: the least sum of squares of any size up to L.
        self.floors_below = list(accumulate(self.floors, min))
        least = self.floors_below[-1]
        if self.tie_limit is not None and least < math.inf:
            # The best subset scores at most what the least squares score, and anything at
            # or past this limit scores worse.
            self.ceiling = min(self.ceiling, self.tie_limit(least))

    @property
    def limit(self) -> float:
        """Sums of squares at or past this cannot be the answer."""
        return min(self.best[1], self.ceiling)

    def run(self) -> Best:
        values, groups, size = self.values, self.groups, self.size
        squares = sum(v * v for v in values)
        # No subset can leave fewer squares than taking every group from the fullest node.
        floor = self.base - squares + least_squares(values, groups, size)
        smallest_cap = min(self.caps, default=0)
        if self.tie_limit is not None and self.best[1] > floor:
            # Knowing the least squares first lets every size stop at what can tie them.
            self._floors()
        for length in range(len(values), 0, -1):
            if self.best[1] <= floor:
                break  # later subsets can at best tie, and ties keep the first
            if self.floors is not None:
                if self.limit <= self.floors_below[length]:
                    break  # no size left can go below the limit
                if self.floors[length] >= self.limit:
                    continue
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
            # Still the first subset with this balance, but a lower balance now needs fewer
            # squares than this one has.
            self.best = (balance, float(squares), self.best[2])

    # ---- sizes where a node's share depends only on its rank -----------------------------

    def _ranked(self, length: int) -> None:
        values, size, count = self.values, self.size, len(self.values)
        groups = self.groups
        amounts = [
            groups // length + (1 if rank < groups % length else 0) for rank in range(length)
        ]
        # relief[j][rank]: how much position j lowers the sum of squares at that rank.
        relief = [[v * v - (v - a * size) ** 2 for a in amounts] for v in values]
        # most[j][r]: the largest relief of r more picks from positions j.., the first of them
        # at rank length - r.
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

    # ---- sizes where some node may run out of groups -------------------------------------

    def _relaxed(self, length: int) -> None:
        values, caps, groups, count = self.values, self.caps, self.groups, len(self.values)
        share, short = groups // length, -(-groups // length)
        # A node short of ceil(G / L) groups always gives all it holds; any other node gives at
        # least G // L (the round-robin only ever deals more once short nodes run out).
        lowest = [cap if cap < short else share for cap in caps]
        chosen: list[int] = []
        twin = self.twin

        def visit(start: int) -> None:
            if self.best[1] <= target:
                return  # nothing left of this size can beat it
            missing = length - len(chosen)
            if missing == 0:
                held = [caps[i] for i in chosen]
                if sum(held) < groups:
                    return  # whole groups, not CPUs: upstream checks CPUs, then loops forever
                dealt = deal(held, groups)
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
                # Bounding the last level costs about as much as scoring it.
                if missing == 1 or bound(j + 1, missing - 1) < self.limit:
                    visit(j + 1)
                chosen.pop()

        relaxation = self.relaxation
        if relaxation.general([], lowest, 0, length) >= self.limit:
            return
        # The relaxed bound is loose when many sizes come close to the best; the exact least
        # sum of squares of each size tells them apart, and ends a size once it is reached.
        target = self._floors()[length]
        if target >= self.limit:
            return
        # Only subsets whose deal has one of a few numbers of full rounds can go below the
        # limit; knowing that number, each member's share is known within one group.
        assert self.relief is not None
        rounds = [
            r for r, row in enumerate(self.relief.by_rounds) if self.base - row[length] < self.limit
        ]
        if len(rounds) <= 2:

            def bound(start: int, missing: int) -> float:
                # Only compared with the limit: the first number of rounds that goes below it
                # answers as well as the least of them.
                value = math.inf
                for r in rounds:
                    value = relaxation.in_rounds(chosen, r, start, missing)
                    if value < self.limit:
                        break
                return value
        else:

            def bound(start: int, missing: int) -> float:
                return relaxation.general(chosen, lowest, start, missing)

        visit(0)


class _Relaxation:
    """Lower bounds of the sum of squares of the subsets a branch of the walk can still make,
    from relaxing upstream's deal: groups may go to whichever member is fullest."""

    def __init__(self, values: list[int], caps: list[int], groups: int, size: int, base: int):
        self.values = values
        self.caps = caps
        self.groups = groups
        self.size = size
        self.base = base
        # Made when first needed: free counts from each position on, largest first (the
        # relaxation's candidates), and the fewest groups any node from each position on holds.
        self.suffixes: list[list[int]] = []
        self.least_caps: list[int] = []

    def in_rounds(self, chosen: list[int], rounds: int, start: int, missing: int) -> float:
        """`general` for the subsets whose deal has `rounds` full rounds: a chosen node holding
        that many groups or fewer gives them all, any other gives `rounds` or one more, and
        the others (the fullest left) give from one group to one more than `rounds`."""
        size, values, caps = self.size, self.values, self.caps
        members = [
            (values[i], caps[i], caps[i]) if caps[i] <= rounds else (values[i], rounds, rounds + 1)
            for i in chosen
        ]
        members += [(v, 1, min(v // size, rounds + 1)) for v in self._suffix(start)[:missing]]
        return self._fill(members)

    def _suffix(self, start: int) -> list[int]:
        if not self.suffixes:
            ends = range(len(self.values) + 1)
            self.suffixes = [sorted(self.values[s:], reverse=True) for s in ends]
            self.least_caps = [min(self.caps[s:], default=0) for s in ends]
        return self.suffixes[start]

    def general(self, chosen: list[int], lowest: list[int], start: int, missing: int) -> float:
        """A lower bound of the sum of squares of every subset that adds `missing` positions
        from `start` on to `chosen`: chosen nodes give at least their lowest share, the others
        (taken as the fullest left, which only helps) at least one group, no node more than
        the round-robin can give one node, and the rest of the groups come from whichever node
        is fullest at the time."""
        size, groups, values, caps = self.size, self.groups, self.values, self.caps
        suffix = self._suffix(start)
        # A node gives D groups only after every other node gave min(its groups, D - 1), so
        # only while 1 + (the sum of min(groups, D - 1) over all nodes) <= G. That sum grows
        # by the number of nodes holding D or more groups from D to D + 1.
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
        members += [(v, 1, min(v // size, most)) for v in suffix[:missing]]
        return self._fill(members)

    def _fill(self, members: list[tuple[int, int, int]]) -> float:
        """The least sum of squares when each member (free CPUs, fewest groups, most groups)
        gives between its fewest and most groups, the groups beyond the fewest going to
        whichever member is fullest at the time (infinite when the groups do not fit)."""
        size = self.size
        spare = self.groups
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
