"""Choosing the NUMA nodes of a distributed take: the combination search of the kubelet's
`takeByTopologyNUMADistributed`, for one number k of NUMA nodes.

Every k-combination of the NUMA nodes (in the packed NUMA order) that can hold an even share
of the request in whole groups is scored: the remainder groups go round-robin to the subset
of the combination that leaves the free CPUs of all NUMA nodes most balanced (the kubelet's
rounded standard deviation), larger subsets first. The first combination with the strictly
lowest score wins, and within it the first subset with the strictly lowest score.

`exhaustive_plan` scores every combination; `pruned_plan` gives the same plan with less work
(the tests hold both to a literal transcription of upstream's walk). Whatever the combination
and subset, the free CPUs left sum to the same total, so a lower score needs a strictly lower
sum of squares: a bound on that sum (take from the largest free counts, each remainder group
from the fullest node) skips whole families of combinations, and the remainder subsets of a
combination are searched the same way (`remainder`) instead of scoring all 2^k of them.

On many nearly exhausted NUMA nodes most branches end in combinations that cannot beat the
first one scored, so the walk remembers what it computed: the bound of each multiset of free
counts a branch can take at best, and for each list of free counts a combination leaves to
deal the remainder over, the least sum of squares any subset of it can leave
(`remainder_floor`). A combination whose least sum of squares cannot beat the best is not
searched at all.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import combinations

from dracpu.allocator.algorithm.balance import mean, round3, standard_deviation
from dracpu.allocator.algorithm.remainder import best_remainder, deal, least_squares
from dracpu.allocator.algorithm.remainder_floor import Reliefs, relief_bound


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
        share = self.share
        return all(free[n] >= share for n in combo)

    def any_acceptable(self) -> bool:
        """Whether some k-combination passes `acceptable`: the k nodes that can give the share
        and hold the most whole groups are the best try (whole groups cover the CPUs too)."""
        share, size = self.share, self.group_size
        groups = sorted((f // size for f in self.free.values() if f >= share), reverse=True)
        return len(groups) >= self.k and sum(groups[: self.k]) * size >= self.count

    def left_after_share(self, combo: tuple[int, ...]) -> dict[int, int]:
        left, share = dict(self.free), self.share
        for numa in combo:
            left[numa] -= share
        return left


def best_plan(
    numas: list[int], free: dict[int, int], count: int, group_size: int, k: int
) -> Plan | None:
    return pruned_plan(Problem(tuple(numas), free, count, group_size, k))


@dataclass(slots=True)
class _Memo:
    """What the remainder searches of one plan learn about the free counts they deal over
    (combinations often leave the same ones)."""

    reliefs: Reliefs = field(default_factory=dict)
    bounds: dict[tuple[int, ...], float] = field(default_factory=dict)  # `relief_bound`

    def most_relief(self, values: list[int], groups: int, size: int) -> float:
        """At least the most relief of any subset: known, or bounded (cheaper, and mostly
        enough to tell that a combination cannot beat the best)."""
        key = tuple(values)
        known = self.reliefs.get(key)
        if known is not None:
            return max(known.by_size)
        bound = self.bounds.get(key)
        if bound is None:
            bound = self.bounds[key] = relief_bound(values, groups, size)
        return bound


def _best_subset(
    problem: Problem,
    combo: tuple[int, ...],
    left: dict[int, int],
    ceiling: float,
    memo: _Memo | None = None,
) -> tuple[float, float, tuple[int, ...]]:
    """Score of the best remainder subset of `combo`: (balance, sum of squares, subset), the
    first one in upstream's order with the lowest balance (see `remainder`).

    Subsets whose sum of squares is not below `ceiling` need not be scored: they cannot beat
    the plan already found, and the result only matters if it does.
    """
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
    # Only a search with a ceiling can be cut short (the first one has none).
    if (
        memo is not None
        and ceiling < math.inf
        and base - memo.most_relief(values, groups, size) >= ceiling
    ):
        return math.inf, math.inf, ()  # no subset goes below the ceiling
    limit = _tie_limit_of(left, groups * size)
    reliefs = None if memo is None else memo.reliefs
    balance, squares, picks = best_remainder(
        values, groups, size, base, ceiling, score, reliefs, limit
    )
    return balance, squares, tuple(candidates[i] for i in picks)


def _deviation(values: list[int]) -> float:
    average = mean(values)
    return math.sqrt(sum((v - average) * (v - average) for v in values) / len(values))


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
        # A node with as many free CPUs as the one before it in the order: a combination
        # that takes it but not that one scores exactly as the earlier one that swaps them.
        self.twin = [
            p > 0 and problem.free[n] == problem.free[self.order[p - 1]]
            for p, n in enumerate(self.order)
        ]
        self.squares_all = sum(v * v for v in problem.free.values())
        self.best: Plan | None = None
        self.best_squares: float = math.inf
        # No sum of squares at or past this can round to a balance as low as a plan already
        # known (see `_seed`), so nothing there can be the answer.
        self.hopeless: float = math.inf
        self.seeded: tuple[tuple[int, ...], tuple[float, float, tuple[int, ...]]] | None = None
        self.memo = _Memo()
        self.share = problem.share
        # Per start position, the free counts of the nodes from there on that can give the
        # share, largest first: the walk bounds every branch with them.
        self.pools = _pools([problem.free[n] for n in self.order], self.share)
        # The bound of each multiset of free counts (sorted) a branch can at best take.
        self.bounds: dict[tuple[int, ...], float] = {}
        self.frees: list[int] = []  # of the nodes chosen so far, in `_visit`

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
            (n for n in self.order if problem.free[n] >= self.share),
            key=lambda n: -problem.free[n],
        )
        fullest = set(ranked[: problem.k])
        combo = tuple(n for n in self.order if n in fullest)
        if len(combo) < problem.k or not problem.acceptable(combo):
            return
        left = problem.left_after_share(combo)
        scored = _best_subset(problem, combo, left, math.inf, self.memo)
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
        free, order, frees, share, twin = (
            problem.free,
            self.order,
            self.frees,
            self.share,
            self.twin,
        )
        limit = min(self.best_squares, self.hopeless)
        pools = self.pools
        for position in range(start, len(order) - missing + 1):
            numa = order[position]
            if free[numa] < share:
                continue  # every combination holding it fails the even-share check
            if len(pools[position + 1]) < missing - 1:
                break  # too few nodes after it can give the share, and fewer after later ones
            if position > start and twin[position]:
                continue  # ties the combination that takes the node before it instead
            chosen.append(numa)
            frees.append(free[numa])
            if self._bound(missing - 1, position + 1) < limit:
                self._visit(chosen, position + 1)
                limit = min(self.best_squares, self.hopeless)
            chosen.pop()
            frees.pop()

    def _bound(self, missing: int, start: int) -> float:
        """A lower bound of the sum of squares of any combination that extends the chosen
        nodes (their free counts are `frees`) with `missing` NUMA nodes from `start` on
        (infinite when none is acceptable)."""
        pool = self.pools[start]
        if len(pool) < missing:
            return math.inf
        # Taking from the largest free counts is never worse (swapping a member for a
        # larger non-member lowers the sum of squares), so the bound only depends on the
        # free counts so taken, which many branches of the walk share.
        picked = tuple(sorted(self.frees + pool[:missing]))
        bound = self.bounds.get(picked)
        if bound is None:
            bound = self._bound_of(picked)
            self.bounds[picked] = bound
        return bound

    def _bound_of(self, picked: tuple[int, ...]) -> float:
        size = self.problem.group_size
        if sum(f // size for f in picked) * size < self.problem.count:
            return math.inf
        # No dealing of the remainder leaves fewer squares than taking each group from the
        # fullest member.
        outside = self.squares_all - sum(f * f for f in picked)
        left = [f - self.share for f in picked]
        return outside + least_squares(left, self.problem.remainder // size, size)

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
            balance, squares, subset = _best_subset(problem, combo, left, ceiling, self.memo)
        if self.best is None or balance < self.best.balance:
            self.best = Plan(combo, subset, problem.share, balance)
            self.best_squares = squares


def _pools(frees: list[int], share: int) -> list[list[int]]:
    """For each start position (and the end), the values of `frees` from there on that are at
    least `share`, largest first: each from the next by inserting one value."""
    pools: list[list[int]] = [[]]
    for value in reversed(frees):
        pool = list(pools[-1])
        if value >= share:
            at = 0
            while at < len(pool) and pool[at] >= value:
                at += 1
            pool.insert(at, value)
        pools.append(pool)
    pools.reverse()
    return pools


def _dealt(problem: Problem, left: dict[int, int], subset: tuple[int, ...]) -> dict[int, int]:
    """Free CPUs of every NUMA node after the remainder is dealt round-robin over `subset`."""
    size = problem.group_size
    final = dict(left)
    taken = deal([left[n] // size for n in subset], problem.remainder // size)
    for numa, groups in zip(subset, taken, strict=True):
        final[numa] -= groups * size
    return final


def _tie_limit_of(left: dict[int, int], dealt: int) -> Callable[[float], float]:
    """A tie limit (see `_tie_limit`) for any outcome of dealing `dealt` CPUs out of `left`,
    from its sum of squares alone: every outcome has the same total and so the same rounded
    mean m, and its summed squared deviation is its sum of squares minus 2·m·total - n·m²."""
    nodes = len(left)
    total = sum(left.values()) - dealt
    average = round3(total / nodes)
    offset = 2 * average * total - nodes * average * average

    def limit(squares: float) -> float:
        # The balance computed this way may differ from the scored one in its last digit;
        # an outcome whose deviation is two thousandths more rounds higher than either.
        balance = round3(math.sqrt(max(squares - offset, 0.0) / nodes))
        return offset + nodes * (balance + 0.002) ** 2 + 0.001

    return limit


def _tie_limit(squares: float, balance: float, deviation: float, nodes: int) -> float:
    """A sum of squares at or past which no outcome (with the same total of free CPUs) rounds
    to `balance` or lower: the squared deviation grows one for one with the sum of squares
    over the number of nodes, and rounding reaches at most half a thousandth up. The last
    thousandth of a square covers the float error of the sums, which is far smaller."""
    return squares + nodes * ((balance + 0.0005) ** 2 - deviation**2) + 0.001


def pruned_plan(problem: Problem) -> Plan | None:
    if not problem.any_acceptable():
        return None
    return _Pruned(problem).run()
