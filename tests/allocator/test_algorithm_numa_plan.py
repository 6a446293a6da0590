"""The NUMA combination search of the distributed take: the fast search must choose exactly
what upstream's literal walk over every combination and subset chooses."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from dracpu.allocator.algorithm.numa_plan import Plan, Problem, exhaustive_plan, pruned_plan


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


@settings(max_examples=300, deadline=None)
@given(problem=problems())
def test_pruned_search_chooses_what_the_literal_walk_chooses(problem: Problem) -> None:
    expected = exhaustive_plan(dataclasses.replace(problem, literal=True))
    assert pruned_plan(problem) == expected
    assert exhaustive_plan(problem) == expected


def test_remainder_goes_where_it_balances_best() -> None:
    """Upstream's own example ("... 1 CPU spilling over to each of NUMA 2, 3 (to keep
    balance)"): 62 CPUs over 4 nodes with 18, 18, 20, 20 free take 15 each, and the two
    remaining CPUs come from the fuller nodes 2 and 3, leaving 3, 3, 4 and 4 free."""
    problem = Problem((0, 1, 2, 3), {0: 18, 1: 18, 2: 20, 3: 20}, 62, 1, 4)
    plan = pruned_plan(problem)
    assert plan == Plan(combo=(0, 1, 2, 3), remainder_numas=(2, 3), share=15, balance=0.5)
