"""The NUMA combination search of the distributed take: the fast search must choose exactly
what upstream's literal walk over every combination and subset chooses."""

from __future__ import annotations

import math
from itertools import combinations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dracpu.allocator.algorithm.balance import standard_deviation
from dracpu.allocator.algorithm.numa_plan import Plan, Problem, exhaustive_plan, pruned_plan
from dracpu.allocator.algorithm.remainder import best_remainder, deal


def upstream_walk(problem: Problem) -> Plan | None:
    """`takeByTopologyNUMADistributed`'s loop for one k, line by line, with the documented
    deviations only: a subset must hold the remainder in whole groups (upstream counts CPUs,
    then loops forever), the scores sum in NUMA id order, and the plan keeps the combination
    and subset that scored best (upstream's reused slices can be overwritten)."""
    free, count, size, k = problem.free, problem.count, problem.group_size, problem.k
    ids = sorted(free)
    best_balance = math.inf
    best: Plan | None = None
    for combo in combinations(problem.numas, k):
        if best_balance == 0:
            break
        if sum(free[n] for n in combo) < count:
            continue
        if sum(free[n] // size for n in combo) * size < count:
            continue
        distribution = (count // len(combo) // size) * size
        if any(free[n] < distribution for n in combo):
            continue
        after = dict(free)
        for numa in combo:
            after[numa] -= distribution
        remainder = count - distribution * len(combo)
        remainder_combo = [n for n in combo if after[n] >= size]
        local_balance = math.inf
        local_subset: tuple[int, ...] = ()
        if remainder == 0:
            local_balance = standard_deviation([after[n] for n in ids])
        for length in range(len(remainder_combo), 0, -1):
            if remainder == 0:
                break
            for subset in combinations(remainder_combo, length):
                if sum(after[n] // size for n in subset) * size < remainder:
                    continue
                left, still = dict(after), remainder
                while still > 0:
                    for numa in subset:
                        if still == 0:
                            break
                        if left[numa] < size:
                            continue
                        left[numa] -= size
                        still -= size
                balance = standard_deviation([left[n] for n in ids])
                if balance < local_balance:
                    local_balance, local_subset = balance, subset
        if local_balance < best_balance:
            best_balance = local_balance
            best = Plan(combo, local_subset, distribution, local_balance)
    return best


@st.composite
def problems(draw: st.DrawFn) -> Problem:
    nodes = draw(st.integers(1, 9))
    per_node = draw(st.sampled_from([4, 8, 12, 16, 32]))
    # Mostly idle nodes with a few busy ones, as on a node that runs a few pods.
    free = {n: draw(st.one_of(st.just(per_node), st.integers(1, per_node))) for n in range(nodes)}
    order = sorted(free, key=lambda n: (free[n], n))
    if draw(st.booleans()):
        order = draw(st.permutations(order))  # the socket-first walk is not sorted by size
    group_size = draw(st.sampled_from([1, 1, 2, 3, 4]))
    groups = sum(free.values()) // group_size
    count = group_size * draw(st.integers(1, max(groups, 1)))
    k = draw(st.integers(1, nodes))
    return Problem(tuple(order), free, count, group_size, k)


@st.composite
def fragmented_16(draw: st.DrawFn) -> Problem:
    """16 NUMA nodes (a 1,024-CPU machine) in the socket-first order of two sockets (each
    sorted by free CPUs), nearly exhausted around the even share of a k-node request: the
    shape that makes the walk combinatorial. The literal walk scores every subset, so only
    one or two more nodes than k can give the share and at most eleven keep a group after it."""
    size = draw(st.sampled_from([1, 1, 2, 4]))
    k = draw(st.integers(1, 16))
    share = size * draw(st.integers(1, 8))
    givers = set(draw(st.permutations(range(16)))[: min(16, k + draw(st.integers(0, 1)))])
    rich = set(draw(st.permutations(sorted(givers)))[: draw(st.integers(0, 11))])
    free = {}
    for n in range(16):
        if n in rich:  # keeps one or more whole groups after its share
            free[n] = share + size * draw(st.integers(1, 6)) + draw(st.integers(0, size - 1))
        elif n in givers:  # can give its share and is then out of whole groups
            free[n] = share + draw(st.integers(0, size - 1))
        else:  # cannot give a share at all
            free[n] = draw(st.integers(1, max(share - 1, 1)))
    order = tuple(
        n for half in (range(8), range(8, 16)) for n in sorted(half, key=lambda n: (free[n], n))
    )
    count = share * k + size * draw(st.integers(0, k - 1))
    return Problem(order, free, min(count, sum(free.values()) // size * size), size, k)


@settings(max_examples=300, deadline=None)
@given(problem=problems())
def test_pruned_search_chooses_what_the_literal_walk_chooses(problem: Problem) -> None:
    expected = upstream_walk(problem)
    assert pruned_plan(problem) == expected
    assert exhaustive_plan(problem) == expected


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problem=fragmented_16())
def test_sixteen_fragmented_nodes_choose_what_the_literal_walk_chooses(problem: Problem) -> None:
    assert pruned_plan(problem) == upstream_walk(problem)


@settings(max_examples=200, deadline=None)
@given(
    values=st.lists(st.integers(1, 24), min_size=1, max_size=12),
    others=st.lists(st.integers(0, 24), max_size=4),
    size=st.sampled_from([1, 1, 2, 3, 4]),
    data=st.data(),
)
def test_remainder_subset_is_the_first_best_of_all_subsets(
    values: list[int], others: list[int], size: int, data: st.DataObject
) -> None:
    """Up to 12 nodes, some short of groups: the search picks the subset upstream's walk over
    all of them (larger first, each size in order) picks."""
    values = [v for v in values if v >= size] or [size]
    groups = data.draw(st.integers(1, max(1, sum(v // size for v in values))))
    everything = values + others
    base = sum(v * v for v in everything)

    def score(picks: tuple[int, ...], dealt: list[int]) -> float:
        final = list(everything)
        for i, taken in zip(picks, dealt, strict=True):
            final[i] -= taken * size
        return standard_deviation(final)

    expected: tuple[float, tuple[int, ...]] = (math.inf, ())
    for length in range(len(values), 0, -1):
        for picks in combinations(range(len(values)), length):
            held = [values[i] // size for i in picks]
            if sum(held) < groups:
                continue
            balance = score(picks, deal(held, groups))
            if balance < expected[0]:
                expected = (balance, picks)
    balance, _, picks = best_remainder(values, groups, size, base, math.inf, score)
    assert (balance, picks) == expected


def test_remainder_goes_where_it_balances_best() -> None:
    """Upstream's own example ("... 1 CPU spilling over to each of NUMA 2, 3 (to keep
    balance)"): 62 CPUs over 4 nodes with 18, 18, 20, 20 free take 15 each, and the two
    remaining CPUs come from the fuller nodes 2 and 3, leaving 3, 3, 4 and 4 free."""
    problem = Problem((0, 1, 2, 3), {0: 18, 1: 18, 2: 20, 3: 20}, 62, 1, 4)
    plan = pruned_plan(problem)
    assert plan == Plan(combo=(0, 1, 2, 3), remainder_numas=(2, 3), share=15, balance=0.5)
