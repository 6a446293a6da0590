"""Fixtures of the big-node tier: one guest per session (booted by tests/harness/guest.py), one
bed in it (containerd + runc and the services, tests/bignode/inguest.py), and each test's pods
and claims removed after it; then, for the modules marked IN_CLUSTER (run last), the bed gives
way to the one-node cluster whose node is the guest (tests/bignode/cluster.py). Every step
prints its time."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from bignode import cluster as guest_cluster_module
from bignode.cluster import GuestCluster, clear, published_capacity
from harness.guest import Guest, missing
from harness.realnode_stack import runtime
from harness.tier_end import TierEnd


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
    disk, images, not_cluster = None, "", guest_cluster_module.prerequisites()
    if RUNTIME != "containerd":
        not_cluster = (
            "the guest's cluster runs its node on containerd (DRACPU_RUNTIME=crio: the bed only)"
        )
    if not not_cluster:
        try:
            disk, images = guest_cluster_module.image_disk()
        except RuntimeError as exc:
            not_cluster = f"error: {exc}"
    state = Path(tempfile.mkdtemp(prefix="dracpu-bignode-", dir="/tmp"))
    booted = Guest(state, disk=disk)
    booted.images = images
    booted.not_cluster = not_cluster
    powered_off = False

    def power_off() -> None:
        nonlocal powered_off
        if not powered_off:
            powered_off = True
            began = time.monotonic()
            booted.stop()
            print(f"bignode: guest powered off in {time.monotonic() - began:.1f} s", flush=True)

    power_off = TIER.at_end(power_off)
    print(f"\nbignode: booting the guest ({state})", flush=True)
    try:
        seconds = booted.start()
        print(f"bignode: guest agent answering after {seconds:.1f} s", flush=True)
        yield booted
    finally:
        power_off()
        if getattr(request.session, "bignode_failed", False):
            print(f"bignode: kept {state} (console.log, guest/logs)")
        else:
            shutil.rmtree(state, ignore_errors=True)


@pytest.fixture(scope="session")
def bed(guest: Guest) -> Guest:
    """containerd 2.4.2 (or CRI-O, DRACPU_RUNTIME=crio) + runc and the five services started in
    the guest, kept for the session."""
    began = time.monotonic()
    times = guest.call("start", runtime=RUNTIME)
    print(
        f"bignode: {times['runtime']} {times['version']} ready in {times['runtime_s']} s, "
        f"services in {times['services_s']} s (total {time.monotonic() - began:.1f} s)",
        flush=True,
    )
    return guest


# The bed's runtime: containerd, or CRI-O with DRACPU_RUNTIME=crio (the guest's cluster, last,
# runs containerd only and is skipped then).
RUNTIME = runtime()

# When the tier's last test is done: the cluster down, then the guest powered off, so no qemu
# runs beside the tiers that come after this one in the session.
TIER = TierEnd(Path(__file__).parent)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Among this tier's tests (in their place in the session: the hook sees every item),
    modules that need another driver configuration run after the others, so the bed restarts
    once, and the cluster's modules last, as the bed does not come back after them; a module
    marked LAST (the reboot, which ends the cluster's state as the others know it) after all,
    and one marked LATE (the soak) just before it."""

    def order(item: pytest.Item) -> tuple[bool, str, bool, bool]:
        module = getattr(item, "module", None)
        return (
            getattr(module, "IN_CLUSTER", False),
            getattr(module, "DRIVER_CONFIG", ""),
            getattr(module, "LAST", False),
            getattr(module, "LATE", False),
        )

    slots = [index for index, item in enumerate(items) if TIER.ours(item)]
    for index, item in zip(slots, sorted((items[i] for i in slots), key=order), strict=True):
        items[index] = item


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    TIER.after(item, nextitem)


@pytest.fixture(scope="session")
def guest_cluster(guest: Guest) -> Iterator[GuestCluster]:
    """The bed stopped, the guest the node of a cluster whose control plane runs on the host,
    the chart installed and its pod Ready; the control plane stopped at the end."""
    reason = guest.not_cluster
    if reason.startswith("error: "):
        raise AssertionError(f"bignode cluster: {reason.removeprefix('error: ')}")
    if reason:
        pytest.skip(f"bignode tier: {reason}")
    began = time.monotonic()
    cluster = guest_cluster_module.bring_up(guest, guest.images)
    down = TIER.at_end(lambda: guest_cluster_module.bring_down(cluster))
    print(f"\nbignode: cluster with its node in the guest up in {time.monotonic() - began:.1f} s")
    try:
        yield cluster
    finally:
        down()


@pytest.fixture(scope="session")
def idle_capacity(guest_cluster: GuestCluster) -> dict[str, int]:
    """What the node publishes with nothing claimed, read before the first test."""
    return published_capacity(guest_cluster)


@pytest.fixture
def in_cluster(
    guest_cluster: GuestCluster, idle_capacity: dict[str, int]
) -> Iterator[GuestCluster]:
    """The guest's cluster without pods or claims in the default namespace: an earlier test's
    are removed first (so the last test's go with the cluster, not one by one), and the node
    publishes every CPU again (bignode.cluster.clear)."""
    began = time.monotonic()
    clear(guest_cluster, idle_capacity)
    yield guest_cluster
    print(f"bignode: test took {time.monotonic() - began:.1f} s", flush=True)


@pytest.fixture
def node(bed: Guest, request: pytest.FixtureRequest) -> Iterator[Guest]:
    """The bed with the test module's DRIVER_CONFIG (default: none), restarted when that
    differs from what runs; left as found: the test's pods removed and claims released."""
    config = getattr(request.module, "DRIVER_CONFIG", "")
    times = bed.call("start", config=config, runtime=RUNTIME)
    if not times["reused"]:
        print(
            f"\nbignode: bed restarted for {config.strip()!r}: {times['runtime']} "
            f"{times['runtime_s']} s, services {times['services_s']} s",
            flush=True,
        )
    began = time.monotonic()
    yield bed
    try:
        bed.call("clean")
    finally:
        bed.call("logs")
        print(f"bignode: test took {time.monotonic() - began:.1f} s", flush=True)
