"""Fixtures of the fleet tier: the host's cluster and the 8-CPU guest as its second node, the
chart installed on both (tests/fleet/fleet.py), and the claimed pods every module reads. All of
it goes down after the tier's last test: the guest powered off, `tools/cluster.sh down`."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from bignode.cluster import image_disk, prerequisites
from fleet.nodes import (
    APISERVER_PORT,
    HOST_ENV,
    Fleet,
    bring_down,
    bring_up,
    claimed_pods,
)
from harness.cluster import ROOT, say, step
from harness.guest import Guest
from harness.guest import missing as guest_missing
from harness.previous_release import previous_dist
from harness.release_dist import make_release
from harness.tier_end import TierEnd
from tiers import require_root

TIER = TierEnd(Path(__file__).parent)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    report = yield
    if report.failed and TIER.ours(item):
        item.session.fleet_failed = True  # type: ignore[attr-defined]
    return report


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Among this tier's tests (in their place in the session), a module marked FIRST (the
    upgrade from the previous release, which the fleet is brought up with) runs before the
    others, so they test this checkout."""

    def order(item: pytest.Item) -> bool:
        return not getattr(getattr(item, "module", None), "FIRST", False)

    slots = [index for index, item in enumerate(items) if TIER.ours(item)]
    for index, item in zip(slots, sorted((items[i] for i in slots), key=order), strict=True):
        items[index] = item


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    TIER.after(item, nextitem)


def _missing() -> str:
    """'' when the fleet can run here, else why not (one line)."""
    reasons = [guest_missing(), prerequisites()]
    done = subprocess.run(
        ["bash", str(ROOT / "tools/cluster.sh"), "missing"],
        capture_output=True, text=True, env={**os.environ, **HOST_ENV}, check=False,
    )  # fmt: skip
    reasons += done.stdout.splitlines()
    return "; ".join(r for r in reasons if r)


@pytest.fixture(scope="session")
def fleet(request: pytest.FixtureRequest) -> Iterator[Fleet]:
    """The fleet up and the chart Ready on both nodes; everything stopped after the tier."""
    require_root("fleet")
    reason = _missing()
    if reason:
        pytest.skip(f"fleet tier: {reason}")
    with step("fleet: the release in dist/ (tools/release.sh)"):
        dist = make_release()
    with step("fleet: the previous release's dist/ (its own tools/release.sh)"):
        previous = previous_dist()
    with step("fleet: the guest's image disk (tools/tier-bignode.sh disk)"):
        disk, images = image_disk(*(previous[1].archives if previous else ()))
    state = Path(tempfile.mkdtemp(prefix="dracpu-fleet-", dir="/tmp"))
    guest = Guest(state, disk=disk, apiserver_port=APISERVER_PORT)
    began = time.monotonic()
    with pytest.MonkeyPatch.context() as patch:
        up = bring_up(guest, images, dist, state, patch.setenv, previous)
        say(f"fleet up in {time.monotonic() - began:.1f} s")
        down = TIER.at_end(lambda: bring_down(up))
        try:
            yield up
        finally:
            down()
    if getattr(request.session, "fleet_failed", False):
        say(f"kept {state} (console.log, guest/logs)")
    else:
        shutil.rmtree(state, ignore_errors=True)


@pytest.fixture(scope="session")
def idle(fleet: Fleet) -> dict[str, dict[str, int]]:
    """What each node publishes with nothing claimed, read before the first claim."""
    return {node: fleet.capacity_of(node) for node in fleet.nodes}


@pytest.fixture(scope="session")
def claimed(fleet: Fleet, idle: dict[str, dict[str, int]]) -> Iterator[Fleet]:
    """The two claimed pods (`claimed_pods`), running for the rest of the tier."""
    with claimed_pods(fleet, idle):
        yield fleet
