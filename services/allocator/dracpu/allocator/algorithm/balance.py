"""The balance score of the NUMA-distributed take: a standard deviation computed exactly as
the kubelet does (mean and result rounded half away from zero to 3 decimals), so that ties
resolve the same way. Values are always given in ascending NUMA id order; upstream sums them
in Go map order, which makes its last-digit rounding random."""

from __future__ import annotations

import math
from collections.abc import Sequence


def round3(value: float) -> float:
    """Go's `math.Round(v*1000)/1000`: halves go away from zero (Python's round() goes to
    even)."""
    scaled = value * 1000
    whole = math.trunc(scaled)
    if abs(scaled - whole) >= 0.5:
        whole += 1 if scaled > 0 else -1
    return whole / 1000


def mean(values: Sequence[int]) -> float:
    total = 0.0
    for value in values:
        total += float(value)
    return round3(total / len(values))


def standard_deviation(values: Sequence[int]) -> float:
    average = mean(values)
    total = 0.0
    for value in values:
        total += (value - average) * (value - average)
    return round3(math.sqrt(total / len(values)))
