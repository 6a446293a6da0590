"""Allocation latency in a fragmented state (after 10,000 random prepare/unprepare steps).

For each machine (2-socket HT Xeon, EPYC NPS4, 1024-CPU 8-NUMA) and count (1, 4, 16, 64):

- take:    the placement algorithm over the node's whole free set (what the kubelet does);
- prepare: the allocator's pure prepare path in the default numanode grouping (device lookup,
           opaque policy, placement inside the NUMA device with the most free CPUs, new state);
- durable: one prepare, and one unprepare, of a 1-CPU claim through the live allocator with
           real files (fsync included) on a temp dir, on the 1024-CPU machine with 0, 200 and
           1,000 other claims active (their cost must not grow with that number).

Prints median and p99 in microseconds. Target: take of 64 CPUs out of 1024 under 1 ms median.
Usage: python benchmarks/allocator_bench.py [--steps N] [--repeat N] [--seed N]
                                            [--active N,N,...] [--durable-only] [--base-dir DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from dracpu.allocator import claims
from dracpu.allocator.algorithm import Policy, take_cpus
from dracpu.allocator.claims import NodeState, PrepareInput, ResultInput
from dracpu.allocator.domain.devices import DeviceOptions, build_devices
from dracpu.allocator.live.node import NodeAllocator
from dracpu.core.driver import CPU_CAPACITY
from dracpu.core.errors import DracpuError
from dracpu.core.machine import Machine
from dracpu.topology.discovery import discover
from dracpu.topology.fixtures import write_fixture

FIXTURES = ("xeon-2s-ht", "epyc-2s-nps4", "big-1024")
COUNTS = (1, 4, 16, 64)


def load(name: str) -> Machine:
    root = Path(tempfile.mkdtemp(dir="/tmp", prefix="bench-"))
    try:
        return discover(write_fixture(name, root))
    finally:
        shutil.rmtree(root, ignore_errors=True)


def request(uid: str, device: str, count: int) -> PrepareInput:
    result = ResultInput(request="r", device=device, pool="n", consumed={CPU_CAPACITY: str(count)})
    return PrepareInput(uid=uid, namespace="bench", name=uid, results=(result,))


def fragment(machine: Machine, steps: int, rng: random.Random) -> NodeState:
    """Random prepares (1-8 CPUs on a random NUMA device) and unprepares, keeping the node
    roughly 40-60% allocated, so free CPUs are scattered over every device."""
    state = NodeState(machine=machine, devices=build_devices(machine, DeviceOptions()))
    devices = [d.name for d in state.devices.devices]
    online = len(state.online)
    serial = 0
    for _ in range(steps):
        used = len(state.exclusive) / online
        if state.records and (used > 0.6 or (used > 0.4 and rng.random() < 0.5)):
            uid = rng.choice(list(state.records))
            state, _ = claims.unprepare(state, uid)
            continue
        serial += 1
        with contextlib.suppress(DracpuError):  # a full device refuses; that is fine here
            state = claims.prepare(
                state, request(f"f{serial}", rng.choice(devices), rng.randint(1, 8)), 0
            ).state
    return state


def timed(func: Callable[[], object], repeat: int) -> list[float]:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter_ns()
        func()
        samples.append((time.perf_counter_ns() - start) / 1000)
    return samples


def p99(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


def row(machine: str, count: int, what: str, samples: list[float] | None, note: str = "") -> None:
    if samples is None:
        print(f"{machine:<14} {count:>5} {what:<8} {'n/a':>10} {'n/a':>10}  {note}")
        return
    median = statistics.median(samples)
    print(f"{machine:<14} {count:>5} {what:<8} {median:>10.1f} {p99(samples):>10.1f}  {note}")


async def durable(
    machine: Machine, repeat: int, active: int, base_dir: str
) -> tuple[list[float], list[float]]:
    """Prepare and unprepare samples (µs) with `active` other 1-CPU claims prepared first."""
    base = Path(tempfile.mkdtemp(dir=base_dir, prefix="bench-"))
    try:
        node = NodeAllocator(
            state_dir=base / "state", cdi_dir=base / "cdi", options=DeviceOptions()
        )
        await node.start(machine)
        devices = [d.name for d in node.state.devices.devices]
        for i in range(active):
            await node.prepare(request(f"a{i}", devices[i % len(devices)], 1))
        prepares, unprepares = [], []
        for i in range(repeat):
            start = time.perf_counter_ns()
            await node.prepare(request(f"d{i}", devices[i % len(devices)], 1))
            middle = time.perf_counter_ns()
            await node.unprepare(f"d{i}")
            prepares.append((middle - start) / 1000)
            unprepares.append((time.perf_counter_ns() - middle) / 1000)
        return prepares, unprepares
    finally:
        shutil.rmtree(base, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--active", default="0,200,1000", help="active claims for durable")
    parser.add_argument("--durable-only", action="store_true", help="skip take and prepare")
    parser.add_argument(
        "--base-dir", default="/tmp", help="where the durable files live (/dev/shm: no disk)"
    )
    args = parser.parse_args()
    rng = random.Random(args.seed)
    print(f"{'machine':<14} {'count':>5} {'op':<8} {'median µs':>10} {'p99 µs':>10}  state")
    big = load("big-1024")
    for active in (int(n) for n in args.active.split(",") if n):
        prepares, unprepares = asyncio.run(durable(big, args.repeat, active, args.base_dir))
        row("big-1024", 1, "durable", prepares, f"prepare, {active} other claims active")
        row("big-1024", 1, "durable", unprepares, f"unprepare, {active} other claims active")
    if args.durable_only:
        return 0
    for name in FIXTURES:
        machine = load(name)
        started = time.perf_counter()
        state = fragment(machine, args.steps, rng)
        free = state.shared
        note = (
            f"{len(state.records)} claims, {len(free)}/{len(state.online)} free "
            f"({time.perf_counter() - started:.1f}s to fragment)"
        )
        for count in COUNTS:
            if count > len(free):
                row(name, count, "take", None, "fewer free CPUs than requested")
            else:
                try:
                    take_cpus(machine, free, count, Policy())
                    row(
                        name,
                        count,
                        "take",
                        timed(partial(take_cpus, machine, free, count, Policy()), args.repeat),
                        note,
                    )
                except DracpuError as exc:
                    row(name, count, "take", None, str(exc))
            device = max(state.devices.devices, key=lambda d: len(d.cpus & free))
            if count > len(device.cpus & free):
                row(name, count, "prepare", None, f"no NUMA device has {count} free CPUs")
                continue
            probe = request("probe", device.name, count)
            row(
                name,
                count,
                "prepare",
                timed(partial(claims.prepare, state, probe, 0), args.repeat),
                device.name,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
