"""The control plane away with claimed pods running, on the big-node guest's cluster: the API
server and etcd stopped by PID for OUTAGE_SECONDS (5 minutes; DRACPU_BIGNODE_OUTAGE_SECONDS for
a run by hand), then started again with the data they had (tools/controlplane.sh stop, resume),
so the cluster's state is what it was. The scheduler and the controller-manager stay up.

No pod can be created without an API server, so the steady stream of new containers is the
node's own: containers that exit every BLINK_SECONDS under restartPolicy Always, each started
again by the kubelet (after its back-off) with nobody asking, two holding claims allocated
before the outage and two unclaimed. Beside them, a claimed container that runs throughout.

A sampler in the guest reads every container's kernel view twice a second from before the
outage until the cluster has converged after it. Asserted: no container off its cpuset at any
sample (a claimed one on exactly its claim's CPUs, an unclaimed one on none of a claim's), the
node's own stream of starts went on (new containers during the outage), none of the driver's
five containers was restarted (the runtime's attempt and container id, then the kubelet's
restart counts), and once the API server is back the node publishes what it published before
and every claim's allocation and status are what they were, within CONVERGE_SECONDS.

Converged also means the cluster's clients watch again what they watched before (the API
server's own count of open watches per resource): until the scheduler's watch of the
ResourceSlices is back, it allocates from what it saw before the outage, and a module after
this one would find a taint published since ignored."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from bignode.cluster import POD_TIMEOUT, GuestCluster, clear, published_capacity
from e2e.scenarios import start_pod
from harness.cluster import (
    NAMESPACE,
    ROOT,
    claim_cpus,
    claim_manifest,
    cpus_request,
    pod_manifest,
)
from harness.control_plane import CommandError
from harness.speed import budget
from harness.waits import wait_for

from dracpu.core.cpuset import CPUSet

pytestmark = [pytest.mark.bignode, pytest.mark.timeout(3600)]
IN_CLUSTER = True  # conftest: after the bed's modules; the bed gives way to the cluster

OUTAGE_SECONDS = float(os.environ.get("DRACPU_BIGNODE_OUTAGE_SECONDS", "300"))
BLINK_SECONDS = 15  # a blinking container's run before it exits (0) and the kubelet restarts it
# From the API server's /readyz to the node's slices and claims as they were.
CONVERGE_SECONDS = budget(180)
STOPPED = ("apiserver", "etcd")
BLINK = ["sh", "-c", f"trap 'exit 0' TERM; sleep {BLINK_SECONDS} & wait"]
# pod -> [(container, claim it holds or "", blinks)]
PODS = {
    "steady": [("work", "steady-cpus", False)],
    "blink-a": [("claimed", "blink-a-cpus", True), ("shared", "", True)],
    "blink-b": [("claimed", "blink-b-cpus", True), ("shared", "", True)],
}
CLAIM_SIZES = {"steady-cpus": 2, "blink-a-cpus": 1, "blink-b-cpus": 1}
# What the scheduler and the controllers allocate and bind from: each watched again after the
# outage by as many clients as before it.
WATCHED = re.compile(
    r'^apiserver_longrunning_requests\{[^}]*group="(?:resource\.k8s\.io|)"[^}]*'
    r'resource="(\w+)"[^}]*verb="WATCH"[^}]*\} (\d+)$'
)


@dataclass
class Outage:
    """What the node and the cluster showed before, during and after the outage."""

    slices_before: dict[str, int]
    watches_before: dict[str, int]
    claims_before: dict[str, dict[str, Any]]
    driver_before: dict[str, dict[str, Any]]
    restarts_before: dict[str, int]
    window: tuple[float, float] = (0.0, 0.0)  # the guest's uptime at the stop and the resume
    driver_during: list[dict[str, dict[str, Any]]] = field(default_factory=list)
    driver_after: dict[str, dict[str, Any]] = field(default_factory=dict)
    restarts_after: dict[str, int] = field(default_factory=dict)
    claims_after: dict[str, dict[str, Any]] = field(default_factory=dict)
    watches_after: dict[str, int] = field(default_factory=dict)
    converged_in: float = 0.0
    sampled: dict[str, Any] = field(default_factory=dict)


def _controlplane(*args: str) -> None:
    done = subprocess.run(
        ["bash", str(ROOT / "tools/controlplane.sh"), *args],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"tools/controlplane.sh {args[0]}: {done.stderr[-1500:]}"


def _watches(cluster: GuestCluster) -> dict[str, int]:
    """Open watches per resource of the core and resource.k8s.io groups (pods, nodes,
    resourceslices, ...), from the API server's /metrics."""
    counts: dict[str, int] = {}
    for line in cluster.kubectl("get", "--raw", "/metrics").splitlines():
        found = WATCHED.match(line)
        if found:
            counts[found.group(1)] = counts.get(found.group(1), 0) + int(found.group(2))
    return counts


def _driver_containers(cluster: GuestCluster) -> dict[str, dict[str, Any]]:
    """The driver's containers as the node's runtime has them: id and attempt."""
    attempts: dict[str, dict[str, Any]] = cluster.guest.call("container_attempts")
    return {k: v for k, v in attempts.items() if k.startswith(f"{NAMESPACE}/")}


def _driver_restarts(cluster: GuestCluster) -> dict[str, int]:
    """The kubelet's restart count of each driver container, as the API server has it."""
    pod = cluster.driver_pod()
    assert pod is not None
    return {s["name"]: int(s["restartCount"]) for s in pod["status"]["containerStatuses"]}


def _claim_status(cluster: GuestCluster, claim: str) -> dict[str, Any]:
    """The claim's allocation, reservedFor and the driver's status.devices (its conditions'
    times left out: a condition written again at the same state keeps its meaning)."""
    status = cluster.get("resourceclaim", claim).get("status", {})
    devices = [
        {
            **{k: v for k, v in device.items() if k != "conditions"},
            "conditions": [
                {k: v for k, v in c.items() if k != "lastTransitionTime"}
                for c in device.get("conditions", [])
            ],
        }
        for device in status.get("devices", [])
    ]
    return {
        "allocation": status.get("allocation"),
        "reservedFor": sorted(r["name"] for r in status.get("reservedFor", [])),
        "devices": devices,
    }


def _start_workload(cluster: GuestCluster) -> dict[str, str]:
    """The pods Running; claim uid -> its CPUs, as its containers' env says."""
    for claim, size in CLAIM_SIZES.items():
        cluster.apply(claim_manifest(claim, [cpus_request(size)]))
    for pod, containers in PODS.items():
        claims = sorted({c for _, c, _ in containers if c})
        manifest = json.loads(
            pod_manifest(
                pod, [(name, [claim] if claim else []) for name, claim, _ in containers],
                [(claim, claim) for claim in claims],
            )
        )  # fmt: skip
        for spec, (_, _, blinks) in zip(manifest["spec"]["containers"], containers, strict=True):
            if blinks:
                spec["command"] = BLINK
        start_pod(cluster, pod, json.dumps(manifest), POD_TIMEOUT)
    held: dict[str, str] = {}
    for pod, containers in PODS.items():
        for name, claim, _ in containers:
            if claim:
                env = wait_for(
                    lambda pod=pod, name=name: _env_or_none(cluster, pod, name),
                    f"{pod}/{name} running",
                    timeout=POD_TIMEOUT,
                    interval=1,
                )
                uid = cluster.get("resourceclaim", claim)["metadata"]["uid"]
                held[uid] = claim_cpus(env).format()
    return held


def _env_or_none(cluster: GuestCluster, pod: str, name: str) -> dict[str, str] | None:
    cluster._views = None  # a blinking container comes and goes: read afresh
    views = cluster.guest.call("cluster_containers")
    view = views.get(f"default/{pod}/{name}")
    return dict(view["env"]) if view else None


@pytest.fixture(scope="module")
def outage(guest_cluster: GuestCluster, idle_capacity: dict[str, int]) -> Iterator[Outage]:
    cluster = guest_cluster
    clear(cluster, idle_capacity)
    held = _start_workload(cluster)
    # The dra-plugin writes each claim's status.devices after its prepare: all written first.
    wait_for(
        lambda: all(_claim_status(cluster, claim)["devices"] for claim in CLAIM_SIZES),
        "every claim's status.devices written",
        timeout=POD_TIMEOUT,
        interval=1,
    )
    record = Outage(
        slices_before=published_capacity(cluster),
        watches_before=_watches(cluster),
        claims_before={claim: _claim_status(cluster, claim) for claim in CLAIM_SIZES},
        driver_before=_driver_containers(cluster),
        restarts_before=_driver_restarts(cluster),
    )
    assert record.watches_before.get("resourceslices"), record.watches_before
    cp_dir = Path(cluster.kubeconfig).parent
    cluster.guest.call("sampler_start", claims=held)
    resumed = False
    try:
        began = cluster.guest.call("uptime")
        _controlplane("stop", str(cp_dir), *STOPPED)
        print(f"\nbignode: outage: API server and etcd stopped for {OUTAGE_SECONDS:g} s")
        # The outage lasts its time whatever happens on the node: the driver's containers are
        # read at its start and about every 30 s of it.
        reads = max(1, round(OUTAGE_SECONDS / 30.0))
        for _ in range(reads):
            record.driver_during.append(_driver_containers(cluster))
            time.sleep(OUTAGE_SECONDS / reads)
        _controlplane("resume", str(cp_dir))
        resumed = True
        record.window = (began, cluster.guest.call("uptime"))
        back = time.monotonic()

        def converged() -> bool:
            try:
                if published_capacity(cluster) != record.slices_before:
                    return False
                record.claims_after = {c: _claim_status(cluster, c) for c in CLAIM_SIZES}
                record.watches_after = _watches(cluster)
            except CommandError:  # the API server still warming up
                return False
            watching = all(
                record.watches_after.get(resource, 0) >= count
                for resource, count in record.watches_before.items()
            )
            return watching and record.claims_after == record.claims_before

        try:
            wait_for(
                converged,
                "the slices, the claims and the API server's watches as before the outage",
                timeout=CONVERGE_SECONDS,
                interval=1,
            )
        finally:
            record.converged_in = time.monotonic() - back
    finally:
        if not resumed:
            _controlplane("resume", str(cp_dir))
        record.sampled = cluster.guest.call("sampler_stop") or {}
    record.driver_after = _driver_containers(cluster)
    record.restarts_after = _driver_restarts(cluster)
    _print_summary(record)
    yield record


def _started_during(record: Outage) -> list[dict[str, Any]]:
    start, end = record.window
    return [
        seen
        for seen in record.sampled.get("containers", {}).values()
        if start <= seen["first_seen"] <= end
    ]


def _print_summary(record: Outage) -> None:
    during = _started_during(record)
    claimed = sum(1 for seen in during if seen["claimed"])
    sampled = record.sampled
    off = sum(seen["off_samples"] for seen in sampled.get("containers", {}).values())
    print(
        f"bignode: outage: {len(during)} containers started by the node during it "
        f"({claimed} claimed), {sampled.get('samples', 0)} samples of "
        f"{len(sampled.get('containers', {}))} containers, {off} off their cpuset; "
        f"slices, claims and watches as before {record.converged_in:.1f} s after the API server "
        "was back",
        flush=True,
    )


def test_no_container_leaves_its_cpuset_while_the_control_plane_is_away(outage: Outage) -> None:
    sampled = outage.sampled
    assert not sampled.get("errors"), sampled.get("errors")
    assert sampled["violations"] == [], sampled["violations"][:5]
    off = {cid: seen for cid, seen in sampled["containers"].items() if seen["off_samples"]}
    assert off == {}


def test_the_node_starts_claimed_and_shared_containers_during_the_outage(outage: Outage) -> None:
    during = _started_during(outage)
    assert any(seen["claimed"] for seen in during), during
    assert any(not seen["claimed"] for seen in during), during
    # Each of them started on its cpuset: pinned at its first sample.
    assert all(seen["pinned_at"] == seen["first_seen"] for seen in during), during


def test_no_driver_container_is_restarted(outage: Outage) -> None:
    for seen in [*outage.driver_during, outage.driver_after]:
        assert seen == outage.driver_before
    assert outage.restarts_after == outage.restarts_before


def test_slices_and_claim_status_are_right_once_the_api_server_is_back(outage: Outage) -> None:
    assert outage.claims_after == outage.claims_before
    assert outage.converged_in <= CONVERGE_SECONDS
    for claim, status in outage.claims_after.items():
        assert status["allocation"] and status["reservedFor"] and status["devices"], claim


def test_claimed_containers_hold_their_claims_cpus_after_the_outage(
    guest_cluster: GuestCluster, outage: Outage
) -> None:
    guest_cluster._views = None
    cpus = guest_cluster.cpus_of("steady", "work")
    assert cpus == claim_cpus(guest_cluster.env_of("steady", "work"))
    assert len(cpus) == CLAIM_SIZES["steady-cpus"]
    others = CPUSet()
    for claim in ("blink-a-cpus", "blink-b-cpus"):
        for result in outage.claims_after[claim]["devices"]:
            others = others | CPUSet.parse(result["data"]["cpuset"])
    assert not cpus & others, (cpus, others)
