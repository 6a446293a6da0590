"""The least sum of squares the remainder can leave, for each number of nodes it goes to.

The remainder search (`remainder`) walks subsets one size at a time, in upstream's order, and
skips a size only when a bound says none of its subsets can beat the best one found. When the
free counts are nearly even, many sizes come within a few units of the best, and a relaxed
bound cannot tell them apart. This module gives the exact minimum of every size at once, from
the structure of upstream's round-robin deal of G groups over a subset:

- with R full rounds, a member holding R groups or fewer gives all it holds (it is exhausted),
  and every other member (active) gives R, or R + 1 if it is among the first G' actives in
  the subset's order, where G' is what the full rounds left over (0 <= G' < the actives);
- conversely, any exhausted and active members whose totals meet those equations are a subset
  whose deal has exactly R rounds.

Exhausted members give the same whatever their order, so for R rounds the best of them are the
fullest of each group count (a small knapsack over counts, built once as R grows). Actives give
more relief the fuller they are, and the extra groups go to the first of them in order: in a
stretch of non-decreasing free counts (a socket's nodes, in the packed order) the last k are at
least as full, member by member, as any other k of it, so each stretch contributes its last k,
and only how many each stretch gives is searched (the extras going to earlier stretches first).
The sum of squares then follows from the relief: how much each member's share lowers it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

_NONE = -math.inf
# Relief (how much the sum of squares drops) by number of exhausted members, per total of the
# groups they hold.
_Table = dict[int, list[float]]
# Per stretch of non-decreasing free counts: prefix sums of the relief of R groups and of the
# relief of the extra group, each member of the stretch in order.
_Stretch = tuple[list[int], list[int]]


@dataclass(frozen=True, slots=True)
class Relief:
    """How far the sum of squares of the free CPUs can drop at most, per subset size (the
    index; minus infinity when no subset of that size holds the groups): over all subsets,
    and over the subsets whose deal has a given number of full rounds."""

    by_size: list[float]
    by_rounds: list[list[float]]


# Free counts of the candidates, in order -> `most_relief` of them (for fixed groups and size).
Reliefs = dict[tuple[int, ...], Relief]


def most_relief(values: list[int], groups: int, size: int) -> Relief:
    """The `Relief` of dealing `groups` groups of `size` round-robin over some of `values` (in
    order; each value holds a whole group)."""
    caps = [v // size for v in values]
    top = max(caps, default=0)
    by_rounds = [[_NONE] * (len(values) + 1) for _ in range(top + 1)]
    by_cap: dict[int, list[int]] = {}
    for value, cap in zip(values, caps, strict=True):
        by_cap.setdefault(cap, []).append(value * value - (value - cap * size) ** 2)
    exhausted: _Table = {0: [0]}
    for rounds, best in enumerate(by_rounds):
        if rounds in by_cap:
            _add_cap(exhausted, rounds, by_cap[rounds], groups)
        active = [v for v, cap in zip(values, caps, strict=True) if cap > rounds]
        stretches = _stretches(active, rounds, size)
        most = len(active) if rounds == 0 else min(len(active), groups // rounds)
        # The exhausted members hold at most `held` groups, so the actives and their extra
        # groups take the rest: count * rounds + extra >= groups - held, extra < count.
        held = max(exhausted)
        fewest = max(1, -(-(groups - held + 1) // (rounds + 1)))
        for count in range(fewest, most + 1):
            rest = groups - rounds * count
            for extra in range(max(0, rest - held), min(count - 1, rest) + 1):
                row = exhausted.get(rest - extra)
                if row is not None:
                    _raise(best, count, row, _active_relief(stretches, count, extra))
    # Subsets that exhaust every member: their groups add up to the remainder exactly. Their
    # deal runs as many rounds as their fullest member holds; counting them with the most
    # rounds any member could have keeps every member's share the same.
    row = exhausted.get(groups)
    if row is not None:
        _raise(by_rounds[top], 0, row, 0)
    any_rounds = [max(column) for column in zip(*by_rounds, strict=True)]
    return Relief(any_rounds, by_rounds)


def _raise(best: list[float], offset: int, row: list[float], gain: float) -> None:
    # In place, element by element: no slices or lists made for the few entries that change.
    for i in range(len(row)):
        value = row[i] + gain
        if value > best[offset + i]:
            best[offset + i] = value


def _add_cap(table: _Table, cap: int, reliefs: list[int], groups: int) -> None:
    """Let members holding `cap` groups be exhausted too (the fullest first). Rows only grow
    into larger totals, so walking the totals downwards reads each row before it changes."""
    sums = [0]
    for relief in sorted(reliefs, reverse=True):
        sums.append(sums[-1] + relief)
    for held in sorted(table, reverse=True):
        row = table[held]
        for taken in range(1, len(sums)):
            total = held + cap * taken
            if total > groups:
                break
            gain = sums[taken]
            target = table.get(total)
            if target is None:
                table[total] = [_NONE] * taken + [r + gain for r in row]
                continue
            end = taken + len(row)
            if len(target) < end:
                target.extend([_NONE] * (end - len(target)))
            _raise(target, taken, row, gain)


def _stretches(active: list[int], rounds: int, size: int) -> list[_Stretch]:
    stretches: list[_Stretch] = []
    start = 0
    for end in range(1, len(active) + 1):
        if end < len(active) and active[end] >= active[end - 1]:
            continue
        base, extra = [0], [0]
        for value in active[start:end]:
            kept = value - rounds * size
            base.append(base[-1] + value * value - kept * kept)
            extra.append(extra[-1] + kept * kept - (kept - size) ** 2)
        stretches.append((base, extra))
        start = end
    return stretches


def _active_relief(stretches: list[_Stretch], count: int, extra: int) -> float:
    """The most relief of `count` active members, the first `extra` of them (in order) giving
    one group more: each stretch gives its last k members, k searched per stretch."""
    if len(stretches) == 1:
        return _last(stretches[0], count, extra)
    if len(stretches) == 2:
        return _two_stretches(stretches[0], stretches[1], count, extra)
    # Members chosen so far -> most relief; the last stretch takes what is left.
    reached: dict[int, float] = {0: 0}
    for index, stretch in enumerate(stretches):
        length = len(stretch[0]) - 1
        after: dict[int, float] = {}
        for chosen, relief in reached.items():
            lowest = count - chosen if index == len(stretches) - 1 else 0
            for taken in range(lowest, min(length, count - chosen) + 1):
                total = relief + _last(stretch, taken, extra - chosen)
                if total > after.get(chosen + taken, _NONE):
                    after[chosen + taken] = total
        reached = after
    return reached.get(count, _NONE)


def _two_stretches(first: _Stretch, second: _Stretch, count: int, extra: int) -> float:
    """`_active_relief` of two stretches, written out (the usual two sockets)."""
    (base1, bonus1), (base2, bonus2) = first, second
    length1, length2 = len(base1) - 1, len(base2) - 1
    best = _NONE
    for taken in range(max(0, count - length2), min(length1, count) + 1):
        # The last `taken` of the first stretch, then the last `count - taken` of the second;
        # the extra groups go to the first stretch's members first.
        lo1, lo2 = length1 - taken, length2 - count + taken
        extra1 = extra if extra < taken else taken
        extra2 = 0 if extra <= taken else extra - taken
        total = (
            base1[length1]
            - base1[lo1]
            + bonus1[lo1 + extra1]
            - bonus1[lo1]
            + base2[length2]
            - base2[lo2]
            + bonus2[lo2 + extra2]
            - bonus2[lo2]
        )
        if total > best:
            best = float(total)
    return best


def _last(stretch: _Stretch, taken: int, extra: int) -> float:
    """The relief of the last `taken` members of a stretch, the first `extra` of them giving
    one group more (`extra` may be out of 0..taken)."""
    base, bonus = stretch
    length = len(base) - 1
    if taken > length:
        return _NONE
    first = length - taken
    extras = 0 if extra < 0 else min(extra, taken)
    return base[length] - base[first] + bonus[first + extras] - bonus[first]


def relief_bound(values: list[int], groups: int, size: int) -> float:
    """At least the most relief of any subset (`most_relief` without sizes), cheaper: order is
    ignored, so the actives of R rounds are the fullest nodes holding more than R groups and
    the extra groups go to the fullest of those."""
    caps = [v // size for v in values]
    by_cap: dict[int, list[int]] = {}
    for value, cap in zip(values, caps, strict=True):
        by_cap.setdefault(cap, []).append(value * value - (value - cap * size) ** 2)
    fullest = sorted(values, reverse=True)
    exhausted: dict[int, float] = {0: 0}  # groups held by exhausted members -> most relief
    best = _NONE
    for rounds in range(max(caps, default=0) + 1):
        if rounds in by_cap:
            _add_cap_any(exhausted, rounds, by_cap[rounds], groups)
        base, bonus = [0], [0]
        for value in fullest:
            kept = value - rounds * size
            if kept < size:
                break
            base.append(base[-1] + value * value - kept * kept)
            bonus.append(bonus[-1] + kept * kept - (kept - size) ** 2)
        active = len(base) - 1
        most = active if rounds == 0 else min(active, groups // rounds)
        held = max(exhausted)
        fewest = max(1, -(-(groups - held + 1) // (rounds + 1)))
        for count in range(fewest, most + 1):
            rest = groups - rounds * count
            for extra in range(max(0, rest - held), min(count - 1, rest) + 1):
                relief = exhausted.get(rest - extra)
                if relief is not None and relief + base[count] + bonus[extra] > best:
                    best = relief + base[count] + bonus[extra]
    return max(best, exhausted.get(groups, _NONE))


def _add_cap_any(table: dict[int, float], cap: int, reliefs: list[int], groups: int) -> None:
    """`_add_cap` for any number of members: one relief per total of groups held."""
    sums = [0]
    for relief in sorted(reliefs, reverse=True):
        sums.append(sums[-1] + relief)
    for held in sorted(table, reverse=True):
        start = table[held]
        for taken in range(1, len(sums)):
            total = held + cap * taken
            if total > groups:
                break
            if start + sums[taken] > table.get(total, _NONE):
                table[total] = start + sums[taken]
