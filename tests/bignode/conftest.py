"""Fixtures of the big-node tier: one guest per session (booted by tests/bignode/guest.py), one
bed in it (containerd + runc and the services, tests/bignode/inguest.py), and each test's pods
and claims removed after it. Every step prints its time."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from bignode.guest import Guest, missing


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    report = yield
    if report.failed:
        item.session.bignode_failed = True  # type: ignore[attr-defined]
    return report


@pytest.fixture(scope="session")
def guest(request: pytest.FixtureRequest) -> Iterator[Guest]:
    """The guest, booted once; powered off (qemu killed by its PID if it hangs) at the end."""
    reason = missing()
    if reason:
        pytest.skip(reason)
    state = Path(tempfile.mkdtemp(prefix="dracpu-bignode-", dir="/tmp"))
    booted = Guest(state)
    print(f"\nbignode: booting the guest ({state})", flush=True)
    try:
        seconds = booted.start()
        print(f"bignode: guest agent answering after {seconds:.1f} s", flush=True)
        yield booted
    finally:
        began = time.monotonic()
        booted.stop()
        print(f"bignode: guest powered off in {time.monotonic() - began:.1f} s", flush=True)
        if getattr(request.session, "bignode_failed", False):
            print(f"bignode: kept {state} (console.log, guest/logs)")
        else:
            shutil.rmtree(state, ignore_errors=True)


@pytest.fixture(scope="session")
def bed(guest: Guest) -> Guest:
    """containerd 2.4.2 + runc and the five services started in the guest, kept for the session."""
    began = time.monotonic()
    times = guest.call("start")
    print(
        f"bignode: containerd ready in {times['containerd_s']} s, services in "
        f"{times['services_s']} s (total {time.monotonic() - began:.1f} s)",
        flush=True,
    )
    return guest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Modules that need another driver configuration run last, so the bed restarts once."""
    items.sort(key=lambda item: getattr(getattr(item, "module", None), "DRIVER_CONFIG", ""))


@pytest.fixture
def node(bed: Guest, request: pytest.FixtureRequest) -> Iterator[Guest]:
    """The bed with the test module's DRIVER_CONFIG (default: none), restarted when that
    differs from what runs; left as found: the test's pods removed and claims released."""
    config = getattr(request.module, "DRIVER_CONFIG", "")
    if config and not os.environ.get("DRACPU_BIGNODE_ALL"):
        # The tier's core (make test) fits its time budget only on one bed; every other driver
        # configuration restarts the services, about 2 minutes under emulation.
        pytest.skip(
            "needs the bed restarted with another driver configuration; DRACPU_BIGNODE_ALL=1"
        )
    times = bed.call("start", config=config)
    if not times["reused"]:
        print(
            f"\nbignode: bed restarted for {config.strip()!r}: containerd "
            f"{times['containerd_s']} s, services {times['services_s']} s",
            flush=True,
        )
    began = time.monotonic()
    yield bed
    try:
        bed.call("clean")
    finally:
        bed.call("logs")
        print(f"bignode: test took {time.monotonic() - began:.1f} s", flush=True)
