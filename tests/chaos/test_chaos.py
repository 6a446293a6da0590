"""Chaos on the real node: claims prepared and released, claimed and shared containers created,
started, stopped and removed on a real containerd + runc while the five services and
containerd are SIGKILLed or SIGSTOPped at random instants. After every few faults the node
settles and the kernel's view is checked (chaos_check); no invariant may ever fail.

DRACPU_CHAOS_SEED replays a seed (the run prints its seed); DRACPU_CHAOS_FAULTS sets how many
faults (default 100). benchmarks/chaos_soak.py runs the same until stopped."""

from __future__ import annotations

import os
import random

import pytest
from chaos.chaos_run import Chaos
from harness.realnode_stack import finish_stack, start_stack

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(1200)]


def test_no_invariant_breaks_under_faults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "DRACPU_REALNODE_PREFIX", os.environ.get("DRACPU_CHAOS_PREFIX", "dracpu-ch-")
    )
    seed = int(os.environ.get("DRACPU_CHAOS_SEED") or random.randrange(1 << 32))
    faults = int(os.environ.get("DRACPU_CHAOS_FAULTS") or 100)
    stack = start_stack(verbosity=1)
    failed = True
    try:
        tally = Chaos(stack, seed).run(faults=faults)
        assert tally.faults >= faults
        assert not tally.violations, f"seed {seed}: {tally.violations}"
        failed = False
    finally:
        finish_stack(stack, failed)
