"""Time `take_cpus` on a synthetic 1024-CPU machine: 2 sockets, 8 NUMA nodes, 512 two-thread
cores (sibling = cpu + 512), 4 uncore caches per NUMA node.

For each strategy (packed, spread, NUMA-distributed) and count (1, 4, 16, 64, 256) it runs the
take on an idle machine and on fragmented ones (a random ~40% of CPUs busy, a fresh pattern per
run) and prints the median and p99 wall-clock time, and the p99 of CPU time (which a busy host's
preemption does not inflate). Target: median under 1 ms for 64 CPUs out of 1024.

Then the NUMA-distributed take on the same CPUs split into 16 (and 32) NUMA nodes, in
fragmented states where most nodes are nearly exhausted (each node busy by its own random
fraction, or all by one), for requests of 2-256 CPUs or any size, in groups of 1, 2 or 4
(5 x --runs cases, each taken once, or timed as the least of --repeats runs). Here upstream's
walk is combinatorial (every k-subset of the nodes, every subset of each for the remainder). It
prints median, p90, p99 and worst wall-clock time, and p99 and worst CPU time. Target: p99 <= 1
ms and worst <= 5 ms; the verdict uses CPU time, which another job preempting this one does not
inflate (on an idle host the two agree).

The first line names the variant that ran: the modules compiled by mypyc (`make venv`), or
Python (no build of these sources, or DRACPU_PURE_PYTHON=1).

.venv/bin/python benchmarks/algorithm_bench.py [--runs N] [--seed S] [--repeats R]
"""

from __future__ import annotations

import argparse
import contextlib
import random
import statistics
import time

from dracpu.allocator.algorithm import VARIANT, Policy, take_cpus
from dracpu.core.cpuset import CPUSet
from dracpu.core.errors import InsufficientCPUsError
from dracpu.core.machine import CPUInfo, Machine

COUNTS = (1, 4, 16, 64, 256)
POLICIES = {
    "packed": Policy(),
    "spread": Policy(strategy="spread"),
    "distributed": Policy(distribute_numa=True, group_size=2),
}
TARGET_MS = 1.0  # median, 64 CPUs, packed
EXHAUSTED_P99_MS, EXHAUSTED_WORST_MS = 1.0, 5.0  # distributed take, nearly exhausted NUMA nodes


def synthetic_machine(numa_nodes: int = 8) -> Machine:
    cores, sockets = 512, 2
    per_numa = cores // numa_nodes
    cpus = []
    for core in range(cores):
        numa = core // per_numa
        for thread in range(2):
            cpus.append(
                CPUInfo(
                    cpu_id=core + thread * cores,
                    core_id=core % (cores // sockets),  # sysfs numbering: per socket
                    socket_id=numa // (numa_nodes // sockets),
                    numa_node_id=numa,
                    uncore_cache_id=core // max(per_numa // 4, 1),
                )
            )
    return Machine.build(cpus)


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def measure(
    machine: Machine, states: list[CPUSet], count: int, policy: Policy
) -> tuple[float, float, float, int]:
    """Median and p99 wall-clock ms, p99 CPU ms (free of preemption on a busy host), unmet."""
    wall: list[float] = []
    cpu: list[float] = []
    unmet = 0
    for available in states:
        started, started_cpu = time.perf_counter(), time.process_time()
        try:
            take_cpus(machine, available, count, policy)
        except InsufficientCPUsError:
            unmet += 1
        cpu.append((time.process_time() - started_cpu) * 1000)
        wall.append((time.perf_counter() - started) * 1000)
    return statistics.median(wall), percentile(wall, 0.99), percentile(cpu, 0.99), unmet


def exhausted_numa_cases(
    machine: Machine, runs: int, rng: random.Random
) -> list[tuple[CPUSet, int, Policy]]:
    """Fragmented states, most with nearly exhausted NUMA nodes, and a request for each."""
    numa_of = {cpu.cpu_id: cpu.numa_node_id for cpu in machine.cpus}
    ids = machine.cpu_set.sorted()
    cases = []
    while len(cases) < runs:
        if rng.random() < 0.4:  # the same busy fraction everywhere
            fraction = rng.uniform(0.3, 0.97)
            busy = dict.fromkeys(machine.numa_nodes, fraction)
        else:  # each NUMA node busy by its own fraction
            floor = rng.uniform(0.3, 0.9)
            busy = {numa: rng.uniform(floor, 1.0) for numa in machine.numa_nodes}
        available = CPUSet(cpu for cpu in ids if rng.random() >= busy[numa_of[cpu]])
        if not available:
            continue
        group_size = rng.choice((1, 2, 2, 4))
        count = rng.choice((2, 4, 8, 16, 32, 62, 64, 100, 128, 200, 256, 0))
        count = min(count or rng.randint(1, len(available)), len(available))
        count -= count % group_size
        if count > 0:
            cases.append((available, count, Policy(distribute_numa=True, group_size=group_size)))
    return cases


def measure_cases(
    machine: Machine, cases: list[tuple[CPUSet, int, Policy]], repeats: int
) -> tuple[list[float], list[float]]:
    """Wall-clock and CPU ms of each case, the least of `repeats` runs of it (as timeit takes
    the least: another process sharing the cores only ever adds time)."""
    wall: list[float] = []
    cpu: list[float] = []
    for available, count, policy in cases:
        walls, cpus = [], []
        for _ in range(repeats):
            started, started_cpu = time.perf_counter(), time.process_time()
            with contextlib.suppress(InsufficientCPUsError):
                take_cpus(machine, available, count, policy)
            cpus.append((time.process_time() - started_cpu) * 1000)
            walls.append((time.perf_counter() - started) * 1000)
        wall.append(min(walls))
        cpu.append(min(cpus))
    return wall, cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="runs of each nearly-exhausted case, its least counted (1: each state seen once, "
        "as the allocator sees it)",
    )
    args = parser.parse_args()
    rng = random.Random(args.seed)
    machine = synthetic_machine()
    ids = machine.cpu_set.sorted()
    idle = [machine.cpu_set] * args.runs
    fragmented = [CPUSet(cpu for cpu in ids if rng.random() >= 0.4) for _ in range(args.runs)]
    take_cpus(machine, machine.cpu_set, 1)  # build the per-machine index once
    print(f"algorithm: {VARIANT}")
    print(f"take_cpus on {len(ids)} CPUs, {len(machine.numa_nodes)} NUMA nodes, {args.runs} runs")
    print(
        f"{'policy':<12} {'state':<11} {'count':>5} {'median ms':>10} {'p99 ms':>8} {'p99 cpu':>8}"
    )
    verdict = ""
    for name, policy in POLICIES.items():
        for state, states in (("idle", idle), ("fragmented", fragmented)):
            for count in COUNTS:
                median, p99, p99_cpu, unmet = measure(machine, states, count, policy)
                note = f"  ({unmet} unmet)" if unmet else ""
                print(
                    f"{name:<12} {state:<11} {count:>5} {median:>10.3f} {p99:>8.3f} "
                    f"{p99_cpu:>8.3f}{note}"
                )
                if name == "packed" and count == 64 and state == "fragmented":
                    ok = median < TARGET_MS
                    verdict = f"target median < {TARGET_MS} ms for 64 CPUs (packed, fragmented): "
                    verdict += f"{median:.3f} ms, {'met' if ok else 'MISSED'}"
    print(verdict)
    print()
    timing = "once" if args.repeats == 1 else f"the least of {args.repeats} runs"
    print(f"distributed take, nearly exhausted NUMA nodes, {args.runs * 5} cases, each {timing}")
    print(
        f"{'NUMA nodes':<11} {'median ms':>10} {'p90 ms':>8} {'p99 ms':>8} {'max ms':>8} "
        f"{'p99 cpu':>8} {'max cpu':>8}"
    )
    for numa_nodes in (16, 32):
        machine = synthetic_machine(numa_nodes)
        take_cpus(machine, machine.cpu_set, 1)
        wall, cpu = measure_cases(
            machine, exhausted_numa_cases(machine, args.runs * 5, rng), args.repeats
        )
        met = percentile(cpu, 0.99) <= EXHAUSTED_P99_MS and max(cpu) <= EXHAUSTED_WORST_MS
        print(
            f"{numa_nodes:<11} {statistics.median(wall):>10.3f} {percentile(wall, 0.9):>8.3f} "
            f"{percentile(wall, 0.99):>8.3f} {max(wall):>8.3f} {percentile(cpu, 0.99):>8.3f} "
            f"{max(cpu):>8.3f}  target p99 <= {EXHAUSTED_P99_MS:g} ms, worst <= "
            f"{EXHAUSTED_WORST_MS:g} ms (CPU time): {'met' if met else 'missed'}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
