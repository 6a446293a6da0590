"""Faults at random instants on the guest's cluster, judged by a reader that is not the
driver (harness.kernel_judge: the guest kernel and the API server only): each of the driver's
five containers stopped with no grace, the kubelet and containerd restarted in the guest, the
API server killed and started again, while claimed and shared pods are created and deleted
(bignode.cluster_soak). The short soak of CI; benchmarks/guest_cluster_soak.py runs the long
one."""

from __future__ import annotations

import os
import random

import pytest
from bignode.cluster import GuestCluster
from bignode.cluster_soak import Soak, let_go, log_to

pytestmark = [pytest.mark.bignode, pytest.mark.timeout(5400)]
IN_CLUSTER = True  # conftest: after the bed's modules; the bed gives way to the cluster
LATE = True  # conftest: after the other cluster modules (its restarts of the API server), but
# before the reboot

# The short soak of `make test`: 50 faults, and one settle after the last (a settle costs half a
# minute to four minutes of the emulated guest). DRACPU_SOAK_FAULTS sets another number (0
# leaves the soak out), DRACPU_SOAK_SETTLE_EVERY pauses the faults for a settle every that many.
FAULTS = int(os.environ.get("DRACPU_SOAK_FAULTS", "50"))
SETTLE_EVERY = int(os.environ.get("DRACPU_SOAK_SETTLE_EVERY", "50"))
if not FAULTS:
    pytestmark.append(
        pytest.mark.skip(reason="the guest cluster's soak left out (DRACPU_SOAK_FAULTS=0)")
    )


def test_fifty_faults_leave_no_cpu_in_two_claims_no_claim_lost_and_nothing_off_or_stuck(
    in_cluster: GuestCluster, idle_capacity: dict[str, int]
) -> None:
    seed = int(os.environ.get("DRACPU_SOAK_SEED", random.randrange(1 << 32)))
    report = log_to(in_cluster.guest.state / "soak.log")
    report(
        f"soak: seed {seed} (DRACPU_SOAK_SEED replays it), {FAULTS} faults, "
        f"a settle every {SETTLE_EVERY}"
    )
    tally = Soak(in_cluster, seed, report).run(FAULTS, settle_every=SETTLE_EVERY)
    report(f"soak: {tally.summary()}")
    for stray in tally.strays_seen:
        report(f"soak: stray seen, never on claimed CPUs: {stray}")
    # Every claim the workload had is gone from the API server: the node holds none of them.
    held = let_go(in_cluster, idle_capacity, report)
    assert tally.offences == [], tally.offences
    assert tally.counts == {
        "cpus_in_two_claims": 0,
        "off_cpuset_past_bound": 0,
        "acknowledged_claims_lost": 0,
        "pods_stuck": 0,
        "strays_past_bound": 0,
    }
    assert sum(tally.faults.values()) >= FAULTS
    assert tally.operations["claimed"] > 0 and tally.operations["delete"] > 0, tally.operations
    assert tally.convergence, "no settle after the faults was ever reached"
    assert tally.unconverged == 0, f"{tally.unconverged} settles never came"
    assert not held, held
