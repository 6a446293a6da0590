"""Chaos soak in the big-node guest: the chaos tier's workload, fault loop and kernel-view
checker (tests/chaos) run inside the qemu guest of tests/bignode (8 vCPUs, 2 sockets, 2 NUMA
nodes, SMT, cgroup v2) on a real containerd 2.4.2 + runc with `dracpu dev up` attached, until
the number of faults is reached. After the run every container still running is checked once
more from the guest kernel's cgroup v2 view. Prints the seed, the guest's boot time, and at the
end: faults injected (per target), settles checked, operations, settle times, violations
(target: 0). Exit status 1 when any invariant broke.

Needs root and the tier's tools (tools/tier-bignode.sh bootstrap); hold the machine lock:

flock /tmp/dracpu-tiers.lock .venv/bin/python benchmarks/bignode_chaos_soak.py \
    [--faults N] [--seed N]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from harness.guest import Guest, missing


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="bignode_chaos_soak.py", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--faults", type=int, default=100, help="faults to inject (default 100)")
    parser.add_argument("--seed", type=int, default=None, help="replay a seed")
    args = parser.parse_args()
    reason = missing()
    if reason:
        print(f"bignode_chaos_soak.py: error: {reason}", file=sys.stderr)
        return 2
    seed = args.seed if args.seed is not None else random.randrange(1 << 32)
    print(f"bignode chaos soak: seed {seed}, {args.faults} faults", flush=True)
    state = Path(tempfile.mkdtemp(prefix="dracpu-bignode-soak-", dir="/tmp"))
    guest = Guest(state)
    began = time.monotonic()
    try:
        print(f"bignode chaos soak: guest up in {guest.start():.1f} s ({state})", flush=True)
        result = guest.call("chaos", timeout=6 * 3600, faults=args.faults, seed=seed)
    finally:
        guest.stop()
    settles = result["settle_seconds"] or [0.0]
    print(f"bignode chaos soak: bed ready in {result['ready_s']} s")
    print(f"bignode chaos soak: faults per target {result['by_target']}")
    print(
        f"bignode chaos soak: operations {result['operations']} "
        f"({result['failed_operations']} failed under faults), settle median "
        f"{statistics.median(settles):.1f} s, max {max(settles):.1f} s"
    )
    for violation in result["violations"]:
        print(f"bignode chaos soak: VIOLATION {violation}")
    print(
        f"bignode chaos soak: seed {seed}, {(time.monotonic() - began) / 60:.1f} min: faults "
        f"injected {result['faults']}, settles checked {result['settles']}, violations "
        f"{len(result['violations'])} (log: {state}/guest/chaos.log)"
    )
    return 1 if result["violations"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
