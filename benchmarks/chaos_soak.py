"""Chaos soak on the real node: the chaos test's workload, fault loop and kernel-view checker
(tests/chaos), run until told to stop (Ctrl-C / SIGTERM, or --duration).

A real containerd + runc node on private directories (tests/realnode) with `dracpu dev up`
attached; claims prepared and released, claimed and shared containers created, started,
stopped and removed, while topology, allocator, dra-plugin, nri-plugin, api and containerd are
SIGKILLed or SIGSTOPped/SIGCONTed at random instants. Prints the seed first, a tally after
every settle, and at the end: faults injected, settles checked, violations (target: 0).
Exit status 1 when any invariant broke.

Needs root and the real-node tools (tools/tier-realnode.sh bootstrap).

.venv/bin/python benchmarks/chaos_soak.py [--duration SECONDS] [--seed N]
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import threading
import time

from chaos.chaos_run import Chaos
from harness.containerd_node import missing_tools
from harness.realnode_stack import finish_stack, start_stack


def main() -> int:
    parser = argparse.ArgumentParser(prog="chaos_soak.py", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--duration", type=float, default=0.0, help="seconds (default: until Ctrl-C)"
    )
    parser.add_argument("--seed", type=int, default=None, help="replay a seed")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("chaos_soak.py: error: needs root (runc, cgroups, overlay mounts)", file=sys.stderr)
        return 2
    reason = missing_tools()
    if reason:
        print(f"chaos_soak.py: error: {reason}", file=sys.stderr)
        return 2
    seed = args.seed if args.seed is not None else random.randrange(1 << 32)
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    if args.duration:
        timer = threading.Timer(args.duration, stop.set)
        timer.daemon = True
        timer.start()
    started = time.monotonic()
    os.environ.setdefault("DRACPU_REALNODE_PREFIX", "dracpu-soak-")
    stack = start_stack(verbosity=1)
    failed = True
    try:
        tally = Chaos(stack, seed, report=lambda line: print(line, flush=True)).run(until=stop)
        failed = bool(tally.violations)
    finally:
        finish_stack(stack, failed)
    minutes = (time.monotonic() - started) / 60
    print(
        f"chaos soak: seed {seed}, {minutes:.1f} min: faults injected {tally.faults}, "
        f"settles checked {tally.settles}, violations {len(tally.violations)}"
    )
    return 1 if tally.violations else 0


if __name__ == "__main__":
    raise SystemExit(main())
