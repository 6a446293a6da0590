"""Choosing the NUMA nodes of a distributed take: the combination search of the kubelet's
`takeByTopologyNUMADistributed`, for one number k of NUMA nodes.

Every k-combination of the NUMA nodes (in the packed NUMA order) that can hold an even share
of the request in whole groups is scored: the remainder groups go round-robin to the subset
of the combination that leaves the free CPUs of all NUMA nodes most balanced (the kubelet's
rounded standard deviation), larger subsets first. The first combination with the strictly
lowest score wins, and within it the first subset with the strictly lowest score.

`exhaustive_plan` walks every combination and subset exactly like upstream (with
`literal=True`); it is the reference the tests hold the fast search to. `pruned_plan` gives
the same plan with less work. Whatever the combination and subset, the free CPUs left sum to
the same total, so a lower score needs a strictly lower sum of squares: a bound on that sum
(take from the largest free counts, each remainder group from the fullest node) skips whole
families of combinations, and when no node can run out of groups the best subset of each
size follows from a small table instead of a walk over all 2^k subsets.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import combinations

from dracpu.allocator.algorithm.balance import mean, standard_deviation


@dataclass(frozen=True, slots=True)
class Plan:
    """NUMA nodes that each get `share` CPUs, and the subset that gets the remainder."""

    combo: tuple[int, ...]
    remainder_numas: tuple[int, ...]
    share: int
    balance: float


@dataclass(frozen=True, slots=True)
class Problem:
    numas: tuple[int, ...]  # the packed NUMA order: combinations are drawn in this order
    free: dict[int, int]
    count: int
    group_size: int
    k: int
    literal: bool = False  # score subsets only by upstream's walk (the reference)

    @property
    def share(self) -> int:
        return (self.count // self.k // self.group_size) * self.group_size

    @property
    def remainder(self) -> int:
        return self.count - self.share * self.k

    def acceptable(self, combo: tuple[int, ...]) -> bool:
        """Upstream's three checks: enough CPUs, enough whole groups, an even share each."""
        free, size = self.free, self.group_size
        if sum(free[n] for n in combo) < self.count:
            return False
        if sum(free[n] // size for n in combo) * size < self.count:
            return False
        return all(free[n] >= self.share for n in combo)

    def left_after_share(self, combo: tuple[int, ...]) -> dict[int, int]:
        left = dict(self.free)
        for numa in combo:
            left[numa] -= self.share
        return left


def best_plan(
    numas: list[int], free: dict[int, int], count: int, group_size: int, k: int
) -> Plan | None:
    return pruned_plan(Problem(tuple(numas), free, count, group_size, k))


def _scores(values: dict[int, int]) -> tuple[float, int]:
    """The kubelet's balance (values in ascending NUMA id order) and the exact sum of
    squares it grows with."""
    ordered = [values[n] for n in sorted(values)]
    return standard_deviation(ordered), sum(v * v for v in ordered)


def _deal(caps: list[int], groups: int) -> list[int]:
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


def _best_subset(
    problem: Problem, combo: tuple[int, ...], left: dict[int, int], ceiling: float
) -> tuple[float, float, tuple[int, ...]]:
    """Score of the best remainder subset of `combo`: (balance, sum of squares, subset), the
    first one in upstream's order with the lowest balance.

    Subsets whose sum of squares is not below `ceiling` need not be scored: they cannot beat
    the plan already found, and the result only matters if it does.
    """
    size = problem.group_size
    groups = problem.remainder // size
    if groups == 0:
        balance, squares = _scores(left)
        return balance, squares, ()
    candidates = [n for n in combo if left[n] >= size]
    if not problem.literal and all(left[n] // size >= groups for n in candidates):
        return _ranked_subsets(problem, candidates, left, ceiling)
    return _walk_subsets(problem, combo, left, ceiling)


def _ranked_subsets(
    problem: Problem, candidates: list[int], left: dict[int, int], ceiling: float
) -> tuple[float, float, tuple[int, ...]]:
    """The same answer as `_walk_subsets` when no candidate can run out of whole groups.

    Then a subset of s nodes gets L = groups // s groups each, plus one for its first
    groups % s nodes: what a node gives depends only on its rank in the subset. The best
    sum of squares of each size follows from a small table over (position, rank); the subsets
    in upstream's order are then walked only where that table says the sum of squares can
    still be low enough to tie the best balance, and the first that ties it is the answer.
    """
    size = problem.group_size
    groups = problem.remainder // size
    values = [left[n] for n in candidates]
    count = len(values)
    base = sum(v * v for v in left.values())

    def relief(value: int, rank: int, length: int) -> int:
        taken = (groups // length + (1 if rank < groups % length else 0)) * size
        return value * value - (value - taken) ** 2

    # most[length][j][r]: the largest relief of r more nodes from positions j.., the first of
    # them at rank length - r.
    most: dict[int, list[list[float]]] = {}
    best_relief, best_length = -math.inf, 0
    for length in range(count, 0, -1):
        table = [[-math.inf] * (length + 1) for _ in range(count + 1)]
        for j in range(count, -1, -1):
            table[j][0] = 0
            if j == count:
                continue
            for r in range(1, length + 1):
                skip = table[j + 1][r]
                take = relief(values[j], length - r, length) + table[j + 1][r - 1]
                table[j][r] = max(skip, take)
        most[length] = table
        if table[0][length] > best_relief:
            best_relief, best_length = table[0][length], length
    least = base - best_relief
    if least >= ceiling:
        return math.inf, math.inf, ()
    # The balance of the best outcome, and a sum of squares past which no subset can round to
    # it (the deviation grows with the sum of squares when the total is fixed).
    first = _first_reaching(most[best_length], values, best_length, best_relief, relief)
    target, spread = _balance_of(candidates, first, left, groups, size)
    limit = _tie_limit(least, target, spread, len(left))
    for length in range(count, 0, -1):
        table = most[length]
        if base - table[0][length] > limit:
            continue
        for picks in _reaching(table, values, length, base - limit, relief):
            balance, _ = _balance_of(candidates, picks, left, groups, size)
            if balance == target:
                subset = tuple(candidates[i] for i in picks)
                squares = base - sum(
                    relief(values[i], rank, length) for rank, i in enumerate(picks)
                )
                return balance, squares, subset
    return math.inf, math.inf, ()  # unreachable: the best outcome itself ties


def _reaching(
    table: list[list[float]],
    values: list[int],
    length: int,
    needed: float,
    relief: Callable[[int, int, int], int],
) -> Iterator[tuple[int, ...]]:
    """Subsets of `length` positions, in lexicographic order, whose relief is at least
    `needed` (the table bounds every unfinished branch exactly)."""
    count = len(values)
    chosen: list[int] = []

    def visit(start: int, gained: float) -> Iterator[tuple[int, ...]]:
        rank = len(chosen)
        missing = length - rank
        if missing == 0:
            yield tuple(chosen)
            return
        for j in range(start, count - missing + 1):
            step = relief(values[j], rank, length)
            if gained + step + table[j + 1][missing - 1] < needed:
                continue
            chosen.append(j)
            yield from visit(j + 1, gained + step)
            chosen.pop()

    yield from visit(0, 0)


def _first_reaching(
    table: list[list[float]],
    values: list[int],
    length: int,
    needed: float,
    relief: Callable[[int, int, int], int],
) -> tuple[int, ...]:
    return next(_reaching(table, values, length, needed, relief))


def _balance_of(
    candidates: list[int], picks: tuple[int, ...], left: dict[int, int], groups: int, size: int
) -> tuple[float, float]:
    """The kubelet's rounded balance after dealing to `picks`, and the unrounded deviation."""
    final = dict(left)
    length = len(picks)
    for rank, i in enumerate(picks):
        final[candidates[i]] -= (groups // length + (1 if rank < groups % length else 0)) * size
    ordered = [final[n] for n in sorted(final)]
    return standard_deviation(ordered), _deviation(ordered)


def _deviation(values: list[int]) -> float:
    average = mean(values)
    return math.sqrt(sum((v - average) * (v - average) for v in values) / len(values))


def _walk_subsets(
    problem: Problem, combo: tuple[int, ...], left: dict[int, int], ceiling: float
) -> tuple[float, float, tuple[int, ...]]:
    """Upstream's walk over every subset (larger first, each size in order).

    Unless `literal`, a branch of the walk is skipped when even the best dealing of the
    remainder over its nodes (each group from the fullest node) cannot bring the sum of
    squares below the best subset's, or below `ceiling`: such subsets cannot score better.
    """
    size = problem.group_size
    groups = problem.remainder // size
    candidates = [n for n in combo if left[n] >= size]
    values = [left[n] for n in candidates]
    caps = [v // size for v in values]
    # relief[i][t]: how much taking t groups from candidate i lowers the sum of squares.
    relief = [
        [v * v - (v - t * size) ** 2 for t in range(cap + 1)]
        for v, cap in zip(values, caps, strict=True)
    ]
    base = sum(v * v for v in left.values())
    members = sum(left[n] * left[n] for n in combo)
    # No subset can leave fewer squares than taking every group from the fullest node.
    floor = base - members + _least_squares([left[n] for n in combo], groups, size)
    best: tuple[float, float, tuple[int, ...]] = (math.inf, math.inf, ())
    count = len(values)
    suffixes = [sorted(values[start:], reverse=True) for start in range(count + 1)]
    if not problem.literal:
        ceiling = min(ceiling, _subset_seed(problem, candidates, left, base))

    def most_relief(chosen: list[int], start: int, missing: int) -> float:
        pool = [values[i] for i in chosen] + suffixes[start][:missing]
        return sum(v * v for v in pool) - _least_squares(pool, groups, size)

    def subsets(length: int) -> Iterator[tuple[int, ...]]:
        chosen: list[int] = []

        def visit(start: int) -> Iterator[tuple[int, ...]]:
            missing = length - len(chosen)
            if missing == 0:
                yield tuple(chosen)
                return
            for i in range(start, count - missing + 1):
                chosen.append(i)
                # Bounding the last level costs about as much as scoring it.
                if (
                    problem.literal
                    or missing == 1
                    or base - most_relief(chosen, i + 1, missing - 1) < min(best[1], ceiling)
                ):
                    yield from visit(i + 1)
                chosen.pop()

        yield from visit(0)

    for length in range(len(candidates), 0, -1):
        if best[1] <= floor:
            break  # later subsets can at best tie, and ties keep the first
        for picks in subsets(length):
            held = [caps[i] for i in picks]
            # Whole groups, not CPUs: upstream checks CPUs here and then loops forever.
            if sum(held) < groups:
                continue
            dealt = _deal(held, groups)
            squares = base - sum(relief[i][t] for i, t in zip(picks, dealt, strict=True))
            if squares >= best[1] or squares >= ceiling:
                continue
            final = dict(left)
            for i, taken in zip(picks, dealt, strict=True):
                final[candidates[i]] -= taken * size
            balance = standard_deviation([final[n] for n in sorted(final)])
            if balance < best[0]:
                best = (balance, squares, tuple(candidates[i] for i in picks))
                if squares <= floor:
                    break
    return best


def exhaustive_plan(problem: Problem) -> Plan | None:
    """Upstream's walk over every combination."""
    best: Plan | None = None
    best_balance = math.inf
    for combo in combinations(problem.numas, problem.k):
        if best_balance == 0:
            break
        if not problem.acceptable(combo):
            continue
        left = problem.left_after_share(combo)
        balance, _, subset = _best_subset(problem, combo, left, math.inf)
        if balance < best_balance:
            best_balance = balance
            best = Plan(combo, subset, problem.share, balance)
    return best


class _Pruned:
    """Depth-first over combinations in upstream's order, skipping subtrees whose best
    possible sum of squares is not below the best plan's."""

    def __init__(self, problem: Problem) -> None:
        self.problem = problem
        self.order = problem.numas
        self.squares_all = sum(v * v for v in problem.free.values())
        self.best: Plan | None = None
        self.best_squares: float = math.inf
        # No sum of squares at or past this can round to a balance as low as a plan already
        # known (see `_seed`), so nothing there can be the answer.
        self.hopeless: float = math.inf
        self.seeded: tuple[tuple[int, ...], tuple[float, float, tuple[int, ...]]] | None = None

    def run(self) -> Plan | None:
        self._seed()
        self._visit([], 0)
        return self.best

    def _seed(self) -> None:
        """Score the combination of the NUMA nodes with the most free CPUs first: the best
        plan is among such combinations, and knowing its balance early lets the walk in
        upstream's order skip every combination that cannot match it."""
        problem = self.problem
        ranked = sorted(
            (n for n in self.order if problem.free[n] >= problem.share),
            key=lambda n: -problem.free[n],
        )
        combo = tuple(n for n in self.order if n in set(ranked[: problem.k]))
        if len(combo) < problem.k or not problem.acceptable(combo):
            return
        left = problem.left_after_share(combo)
        scored = _best_subset(problem, combo, left, math.inf)
        balance, squares, subset = scored
        if balance == math.inf:
            return
        self.seeded = (combo, scored)
        final = _dealt(problem, left, subset)
        values = [final[n] for n in sorted(final)]
        self.hopeless = _tie_limit(squares, balance, _deviation(values), len(values))

    def _visit(self, chosen: list[int], start: int) -> None:
        problem = self.problem
        missing = problem.k - len(chosen)
        if missing == 0:
            self._score(tuple(chosen))
            return
        for position in range(start, len(self.order) - missing + 1):
            numa = self.order[position]
            if problem.free[numa] < problem.share:
                continue  # every combination holding it fails the even-share check
            chosen.append(numa)
            if self._bound(chosen, position + 1) < min(self.best_squares, self.hopeless):
                self._visit(chosen, position + 1)
            chosen.pop()

    def _bound(self, chosen: list[int], start: int) -> float:
        """A lower bound of the sum of squares of any combination that extends `chosen` with
        NUMA nodes from `start` on (infinite when none is acceptable)."""
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
        # Taking from the largest free counts is never worse (swapping a member for a
        # larger non-member lowers the sum of squares), and no dealing of the remainder
        # leaves fewer squares than taking each group from the fullest member.
        outside = self.squares_all - sum(f * f for f in picked)
        left = [f - share for f in picked]
        return outside + _least_squares(left, problem.remainder // size, size)

    def _score(self, combo: tuple[int, ...]) -> None:
        problem = self.problem
        if self.best is not None and self.best.balance == 0:
            return
        if not problem.acceptable(combo):
            return
        left = problem.left_after_share(combo)
        if self.seeded is not None and self.seeded[0] == combo:
            # Scored without a ceiling: the same best subset, so the same decision.
            balance, squares, subset = self.seeded[1]
        else:
            ceiling = min(self.best_squares, self.hopeless)
            balance, squares, subset = _best_subset(problem, combo, left, ceiling)
        if self.best is None or balance < self.best.balance:
            self.best = Plan(combo, subset, problem.share, balance)
            self.best_squares = squares


def _subset_seed(problem: Problem, candidates: list[int], left: dict[int, int], base: int) -> float:
    """A sum of squares past which no remainder subset can tie the best one: scores, for each
    size, the subset of the fullest candidates (in upstream's order) and returns the tie limit
    of the best of them. The walk in upstream's order then skips what cannot reach it."""
    size = problem.group_size
    groups = problem.remainder // size
    fullest = sorted(range(len(candidates)), key=lambda i: -left[candidates[i]])
    best_squares, best_balance, best_deviation = math.inf, math.inf, 0.0
    for length in range(1, len(candidates) + 1):
        subset = tuple(candidates[i] for i in sorted(fullest[:length]))
        if sum(left[n] // size for n in subset) < groups:
            continue
        final = _dealt(problem, left, subset)
        squares = sum(v * v for v in final.values())
        if squares < best_squares:
            values = [final[n] for n in sorted(final)]
            best_squares = squares
            best_balance, best_deviation = standard_deviation(values), _deviation(values)
    if best_squares == math.inf:
        return math.inf
    return _tie_limit(best_squares, best_balance, best_deviation, len(left))


def _dealt(problem: Problem, left: dict[int, int], subset: tuple[int, ...]) -> dict[int, int]:
    """Free CPUs of every NUMA node after the remainder is dealt round-robin over `subset`."""
    size = problem.group_size
    final = dict(left)
    taken = _deal([left[n] // size for n in subset], problem.remainder // size)
    for numa, groups in zip(subset, taken, strict=True):
        final[numa] -= groups * size
    return final


def _tie_limit(squares: float, balance: float, deviation: float, nodes: int) -> float:
    """A sum of squares at or past which no outcome (with the same total of free CPUs) rounds
    to `balance` or lower: the squared deviation grows one for one with the sum of squares
    over the number of nodes, and rounding reaches at most half a thousandth up."""
    return squares + nodes * ((balance + 0.0005) ** 2 - deviation**2) + 2


def _least_squares(values: list[int], groups: int, size: int) -> float:
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


def pruned_plan(problem: Problem) -> Plan | None:
    return _Pruned(problem).run()
