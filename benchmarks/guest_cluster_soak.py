"""The long soak on the big-node guest's cluster: the guest booted, its cluster brought up as
tests/bignode does (control plane on the host, containerd + kubelet in the guest, the chart
installed), then faults at random instants with claimed and shared pods created and deleted
throughout, judged by a reader of the guest kernel and the API server alone
(tests/bignode/cluster_soak.py, tests/harness/kernel_judge.py). Prints the seed first, a line
per fault and settle, and at the end the faults by kind, the judge's counts, the convergence
times (median, p99, max) and the duration; exit status 1 when the judge counted anything
or a settle never came.

Needs root and the big-node tier's tools (tools/tier-bignode.sh bootstrap, the Kubernetes
binaries and helm). Guests run beside each other on their own ports
(DRACPU_BIGNODE_APISERVER_PORT):

.venv/bin/python benchmarks/guest_cluster_soak.py [--faults N] [--seed N] [--settle-every N] \\
    [--minutes M]
"""

from __future__ import annotations

import argparse
import random
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

from bignode import cluster as guest_cluster
from bignode.cluster_soak import Soak, log_to
from harness.guest import Guest, missing


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="guest_cluster_soak.py", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--faults", type=int, default=500, help="faults to inject (default 500)")
    parser.add_argument("--seed", type=int, default=None, help="replay a seed")
    parser.add_argument(
        "--settle-every", type=int, default=10, help="faults between settles (default 10)"
    )
    parser.add_argument(
        "--minutes",
        type=float,
        default=0.0,
        help="stop injecting faults after this long, whatever their number (default: no limit)",
    )
    args = parser.parse_args()
    # Stopped (kill, a CI limit): the guest and the control plane are taken down all the same.
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    reason = missing() or guest_cluster.prerequisites()
    if reason:
        print(f"guest_cluster_soak.py: error: {reason}", file=sys.stderr)
        return 2
    seed = args.seed if args.seed is not None else random.randrange(1 << 32)
    state = Path(tempfile.mkdtemp(prefix="dracpu-bignode-soak-", dir="/tmp"))
    report = log_to(state / "soak.log")
    report(f"guest cluster soak: seed {seed}, {args.faults} faults ({state})")
    began = time.monotonic()
    disk, images = guest_cluster.image_disk()
    guest = Guest(state, disk=disk)
    failed = True
    try:
        report(f"guest cluster soak: guest up in {guest.start():.1f} s")
        cluster = guest_cluster.bring_up(guest, images)
        try:
            report(f"guest cluster soak: cluster up at {time.monotonic() - began:.1f} s")
            tally = Soak(cluster, seed, report).run(
                args.faults, settle_every=args.settle_every, minutes=args.minutes
            )
        finally:
            guest_cluster.bring_down(cluster)
        report(f"guest cluster soak: {tally.summary()}")
        for offence in tally.offences:
            report(f"guest cluster soak: COUNTED {offence}")
        for stray in tally.strays_seen:
            report(f"guest cluster soak: stray seen (never on claimed CPUs): {stray}")
        failed = bool(tally.offences) or tally.unconverged > 0
    finally:
        guest.stop()
        if not failed:
            shutil.copy(state / "soak.log", Path(tempfile.gettempdir()) / f"{state.name}.log")
            shutil.rmtree(state, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
