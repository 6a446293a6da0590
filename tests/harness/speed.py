"""How fast the machine at hand is, so a budget of time is never a guess about another one.

The factor is this machine's time for a fixed piece of pure-Python work over the time an
unloaded 2-core development machine takes for it, at least 1. It is measured once per process
(the median of a few rounds), so a loaded host or an emulated guest (10-50x slower) gets budgets
scaled to itself. DRACPU_SPEED_FACTOR, when set, is used instead of measuring.
"""

from __future__ import annotations

import functools
import os
import statistics
import time

# Seconds the work below takes on an unloaded 2-core development machine.
NOMINAL_SECONDS = 0.02
ROUNDS = 5


def _work() -> float:
    start = time.perf_counter()
    total = 0
    for i in range(200_000):
        total += i * i % 7
    assert total >= 0
    return time.perf_counter() - start


@functools.cache
def factor() -> float:
    """This machine's slowdown against the nominal one, at least 1."""
    given = os.environ.get("DRACPU_SPEED_FACTOR")
    if given:
        return max(float(given), 1.0)
    return max(statistics.median(_work() for _ in range(ROUNDS)) / NOMINAL_SECONDS, 1.0)


def budget(seconds: float) -> float:
    """`seconds` on the nominal machine, on this one."""
    return seconds * factor()
