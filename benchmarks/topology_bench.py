"""Time topology discovery on large synthetic machines (target: < 200 ms for 1024 CPUs).

.venv/bin/python benchmarks/topology_bench.py [--runs N]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from dracpu.topology.discovery import discover
from dracpu.topology.fixtures import write_fixture

MACHINES = ("epyc-2s-nps4", "big-1024")
TARGET_MS = {"big-1024": 200.0}


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def measure(name: str, root: Path, runs: int) -> tuple[float, float]:
    discover(root)  # warm the page cache and imports
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        discover(root)
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples), percentile(samples, 0.99)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=50)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(dir="/tmp", prefix="topobench"))
    try:
        print(f"{'machine':<16} {'cpus':>5} {'median ms':>10} {'p99 ms':>8}  target")
        for name in MACHINES:
            root = write_fixture(name, base / name)
            cpus = len(discover(root).cpus)
            median, p99 = measure(name, root, args.runs)
            target = TARGET_MS.get(name)
            verdict = (
                ""
                if target is None
                else f"< {target:.0f} ms " + ("ok" if median < target else "MISSED")
            )
            print(f"{name:<16} {cpus:>5} {median:>10.1f} {p99:>8.1f}  {verdict}")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
