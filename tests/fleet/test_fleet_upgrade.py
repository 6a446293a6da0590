"""A rolling `helm upgrade` from the previous release to this checkout, across both nodes, with
a claimed pod on each: the fleet is brought up with the previous release's chart and images
(its own dist/, made by its own tools/release.sh), and the upgrade is the operator's command
with the same values file. The DaemonSet replaces one node's driver pod at a time (the chart's
`maxUnavailable: 1`): at every sample at least one node has a Ready driver; no claimed
container restarts; the cpuset of each, read from its own node's kernel all through the
upgrade, never changes; both nodes publish the same devices again, from drivers of this
checkout. A node's driver is refused the other node's slices on the previous release as well
(test_fleet_isolation.py runs whole after the upgrade).

The module's claimed pods are its own, removed after it: the CPU Manager module, next, drains
the host, which a pod without a controller would stop."""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from bignode.cluster import DRIVER_TIMEOUT
from fleet.driver_identity import SLICE_REFUSED, identity_of, slice_manifest
from fleet.nodes import GUEST_POD, HOST_POD, Fleet, claimed_pods
from harness.cluster import NAMESPACE, RELEASE, step
from harness.speed import budget
from harness.waits import wait_for

from dracpu.core.cpuset import CPUSet

pytestmark = [pytest.mark.fleet, pytest.mark.timeout(3600)]
FIRST = True  # conftest: before the other modules, which then test this checkout
SAMPLE_GAP = 1.0


@dataclass
class Samples:
    """What a sampler read while the upgrade ran."""

    cpusets: dict[str, list[CPUSet]] = field(default_factory=lambda: defaultdict(list))
    ready: list[frozenset[str]] = field(default_factory=list)  # nodes with a Ready driver
    failures: list[str] = field(default_factory=list)


@pytest.fixture(scope="module")
def upgrading(fleet: Fleet, idle: dict[str, dict[str, int]]) -> Iterator[Fleet]:
    """The fleet on the previous release with a claimed pod on each node, for this module."""
    with claimed_pods(fleet, idle):
        yield fleet


def _sample(fleet: Fleet, stop: threading.Event, into: Samples) -> None:
    """Until `stop`: the nodes whose driver pod is Ready (the API server), and each claimed
    container's CPUs (its own node's kernel: the task's mask and its cgroup's cpuset)."""
    while not stop.is_set():
        try:
            into.ready.append(frozenset(fleet.ready_drivers()))
            for pod, view in ((HOST_POD, fleet.host), (GUEST_POD, fleet.guest)):
                into.cpusets[pod].append(view.cpus_of(pod, "work"))
        except Exception as exc:  # reported by the test, not lost with the thread
            into.failures.append(f"{type(exc).__name__}: {exc}")
        stop.wait(SAMPLE_GAP)


def _containers(fleet: Fleet) -> dict[str, tuple[str, int]]:
    """Each claimed pod's container: its runtime ID and restart count (the kubelet's view)."""
    found = {}
    for pod in (HOST_POD, GUEST_POD):
        (status,) = fleet.host.get("pod", pod)["status"]["containerStatuses"]
        found[pod] = (status["containerID"], int(status["restartCount"]))
    return found


def _tags(pod: dict[str, Any]) -> set[str]:
    return {c["image"].rpartition(":")[2] for c in pod["spec"]["containers"]}


def _rolled_out(fleet: Fleet) -> dict[str, Any] | None:
    daemonset = fleet.host.get("daemonset", RELEASE, NAMESPACE)
    status = daemonset.get("status", {})
    done = (
        status.get("observedGeneration", 0) >= daemonset["metadata"]["generation"]
        and status.get("desiredNumberScheduled") == len(fleet.nodes)
        and status.get("updatedNumberScheduled") == len(fleet.nodes)
        and status.get("numberAvailable") == len(fleet.nodes)
    )
    return daemonset if done else None


def test_a_rolling_upgrade_from_the_previous_release_moves_no_claimed_container(
    upgrading: Fleet, tmp_path: Path
) -> None:
    fleet = upgrading
    if fleet.previous is None:
        pytest.skip("this checkout is the only release (RELEASES): nothing to upgrade from")
    release, previous = fleet.previous
    head = fleet.host.chart
    before = fleet.driver_pods()
    assert {node: _tags(pod) for node, pod in before.items()} == {
        node: {previous.version} for node in fleet.nodes
    }
    # Node isolation on the previous release: a node's driver cannot write the other's slices.
    own, other = fleet.nodes
    driver = identity_of(fleet, own, tmp_path)
    refused = driver.kubectl("create", "-f", "-", stdin=slice_manifest("forged-other", other))
    assert refused.returncode != 0 and SLICE_REFUSED in refused.stderr, refused
    containers = _containers(fleet)
    devices = {node: fleet.capacity_of(node) for node in fleet.nodes}

    samples, stop = Samples(), threading.Event()
    sampler = threading.Thread(target=_sample, args=(fleet, stop, samples), daemon=True)
    sampler.start()
    try:
        stop.wait(5 * SAMPLE_GAP)  # the claimed pods' CPUs before the upgrade
        with step(f"fleet: helm upgrade from {release.tag} to this checkout, both nodes"):
            fleet.install(head)
            wait_for(
                lambda: _rolled_out(fleet),
                "the DaemonSet rolled out on both nodes",
                timeout=2 * DRIVER_TIMEOUT + budget(300),
                interval=1.0,
            )
            wait_for(
                lambda: set(fleet.ready_drivers()) == set(fleet.nodes) or None,
                "a Ready driver pod of this checkout on each node",
                timeout=budget(300),
                interval=1.0,
            )
        stop.wait(5 * SAMPLE_GAP)  # and after it
    finally:
        stop.set()
        sampler.join(timeout=budget(120))

    assert not samples.failures, samples.failures[:5]
    after = fleet.driver_pods()
    for node in fleet.nodes:
        assert after[node]["metadata"]["uid"] != before[node]["metadata"]["uid"], node
        assert _tags(after[node]) == {fleet.host.app_version}, node
    # One node's driver replaced at a time: the other's was Ready at every sample.
    assert samples.ready and all(samples.ready), [sorted(r) for r in samples.ready]
    assert any(len(r) < len(fleet.nodes) for r in samples.ready), "no driver was ever replaced"
    # Each claimed container kept its CPUs, read from its own kernel from before to after.
    for pod in (HOST_POD, GUEST_POD):
        seen = samples.cpusets[pod]
        assert len(seen) >= 10 and len(set(seen)) == 1, (pod, sorted({str(c) for c in seen}))
    assert _containers(fleet) == containers  # the same containers, never restarted
    wait_for(
        lambda: {node: fleet.capacity_of(node) for node in fleet.nodes} == devices or None,
        "both nodes publishing the devices they published before the upgrade",
        timeout=budget(120),
        interval=1.0,
    )
