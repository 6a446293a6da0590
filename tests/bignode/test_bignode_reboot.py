"""A node reboot with claimed pods, on the big-node guest's cluster: the guest rebooted from
inside (`reboot -f`: the machine reset, nothing stopped first), its containerd and kubelet
started again at boot with the settings `tools/cluster.sh node` had (tools/bignode/node.sh
boot from stage 2, the init system's part), and what a node keeps across a reboot kept on its
disk (containerd's root, the kubelet's root, the driver's /var/lib/dracpu) while /run is lost
(the CDI specs under /var/run/cdi, the NRI socket, every container).

Before the reboot: pod `one` (a container holding a claim of 2 CPUs), pod `two` (a container
holding a claim of 2 CPUs and an unclaimed one) and pod `shared` (unclaimed), all Running.
After it, the kubelet runs them again: each claimed container comes back on the CPUs it had
(the claims stay allocated, the driver's records honoured), their CDI specs are written again,
the unclaimed ones run on the pool, and a sampler in the guest reads every container's kernel
view twice a second from the first moment the guest answers until all are back: no claimed
container ever runs on CPUs of a claim it does not hold. The time from boot (the kernel's
uptime) to every container on its CPUs is printed.

The reboot ends the cluster's state as the other modules know it: this module runs last
(`LAST`, tests/bignode/conftest.py)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from bignode.cluster import (
    DRIVER_TIMEOUT,
    NODE_NAME,
    NODE_STATE_DIR,
    POD_TIMEOUT,
    GuestCluster,
    clear,
)
from e2e.scenarios import start_pod
from harness.cluster import claim_cpus, claim_manifest, cpus_request, pod_manifest
from harness.waits import wait_for

from dracpu.core.cpuset import CPUSet

pytestmark = [pytest.mark.bignode, pytest.mark.timeout(3600)]
IN_CLUSTER = True  # conftest: after the bed's modules; the bed gives way to the cluster
LAST = True  # conftest: after the other cluster modules (the reboot is destructive)

# pod -> [(container, claim it holds or "")]
PODS = {
    "one": [("work", "one-cpus")],
    "two": [("work", "two-cpus"), ("side", "")],
    "shared": [("work", "")],
}
CLAIM_SIZES = {"one-cpus": 2, "two-cpus": 2}
CDI_SPECS = "/var/run/cdi/dra.k8s.io-cpu_claim-*.json"
RUN_WITNESS = "/run/dracpu-reboot-witness"
RECORDS = f"{NODE_STATE_DIR}/claims/*.json"  # the driver's claim records, on the node's disk


@dataclass
class Reboot:
    """What the node ran before the reboot and what it runs after, read from the guest."""

    before: dict[str, dict[str, Any]]  # pod/container -> kernel view, env
    claims_before: dict[str, dict[str, Any]]  # claim name -> its status.allocation
    uids: dict[str, str]  # claim name -> uid
    at_boot: dict[str, Any]  # what the guest held when its agent first answered
    records_before: dict[str, str]  # the claim records' files, by path
    after: dict[str, dict[str, Any]] = field(default_factory=dict)
    claims_after: dict[str, dict[str, Any]] = field(default_factory=dict)
    sampled: dict[str, Any] = field(default_factory=dict)
    records_after: dict[str, str] = field(default_factory=dict)
    specs_after: dict[str, str] = field(default_factory=dict)


def _ours(views: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The test pods' containers, by `pod/container`."""
    wanted = {f"default/{pod}/{c}" for pod, containers in PODS.items() for c, _ in containers}
    return {key.removeprefix("default/"): view for key, view in views.items() if key in wanted}


def _views(cluster: GuestCluster) -> dict[str, dict[str, Any]]:
    """The test pods' containers as the guest kernel has them; `claim`: the uid of the claim a
    container holds (from its DRA_CPUSET_<uid>), or ''."""
    views = _ours(cluster.guest.call("cluster_containers"))
    for view in views.values():
        held = [k.removeprefix("DRA_CPUSET_") for k in view["env"] if k.startswith("DRA_CPUSET_")]
        view["claim"] = held[0] if held else ""
    return views


def _claimed_cpus(view: dict[str, Any]) -> CPUSet:
    return claim_cpus(view["env"])


def _allocation(cluster: GuestCluster, claim: str) -> dict[str, Any]:
    status = cluster.get("resourceclaim", claim).get("status", {})
    return {
        "results": status.get("allocation", {}).get("devices", {}).get("results", []),
        "reserved_for": sorted(r["name"] for r in status.get("reservedFor", [])),
    }


def _uid_of(record_text: str) -> str:
    return str(json.loads(record_text)["body"]["uid"])


def _record_cpus(records: dict[str, str]) -> dict[str, CPUSet]:
    """Claim uid -> the CPUs the driver's record on the node's disk holds."""
    return {
        _uid_of(text): CPUSet.parse(json.loads(text)["body"]["cpus"]) for text in records.values()
    }


def _spec_uids(specs: dict[str, str]) -> set[str]:
    return {path.rsplit("claim-", 1)[1].removesuffix(".json") for path in specs}


def _start_workload(cluster: GuestCluster) -> None:
    for claim, size in CLAIM_SIZES.items():
        cluster.apply(claim_manifest(claim, [cpus_request(size)]))
    for pod, containers in PODS.items():
        claims = sorted({c for _, c in containers if c})
        manifest = pod_manifest(
            pod, [(name, [claim] if claim else []) for name, claim in containers],
            [(claim, claim) for claim in claims],
        )  # fmt: skip
        start_pod(cluster, pod, manifest, POD_TIMEOUT)


def _all_back(cluster: GuestCluster, reboot: Reboot) -> bool:
    """Every test container runs again, a new process of the new boot, claimed ones on the
    CPUs they had, unclaimed ones on every CPU no claim holds."""
    views = _views(cluster)
    if set(views) != set(reboot.before):
        return False
    held = CPUSet()
    for view in reboot.before.values():
        if view["claim"]:
            held = held | CPUSet.parse(view["cpus_allowed"])
    pool = cluster.online() - held
    for key, view in views.items():
        if view["cpus_allowed"] != view["cpus_effective"]:
            return False
        wanted = CPUSet.parse(reboot.before[key]["cpus_allowed"]) if view["claim"] else pool
        if CPUSet.parse(view["cpus_allowed"]) != wanted:
            return False
    reboot.after = views
    return True


@pytest.fixture(scope="module")
def rebooted(guest_cluster: GuestCluster, idle_capacity: dict[str, int]) -> Iterator[Reboot]:
    """The workload Running, the guest rebooted, and everything read once it is all back."""
    cluster = guest_cluster
    clear(cluster, idle_capacity)
    _start_workload(cluster)
    before = _views(cluster)
    assert set(before) == {f"{p}/{c}" for p, cs in PODS.items() for c, _ in cs}, before
    uids = {claim: cluster.get("resourceclaim", claim)["metadata"]["uid"] for claim in CLAIM_SIZES}
    claims_before = {claim: _allocation(cluster, claim) for claim in CLAIM_SIZES}
    held = {v["claim"]: _claimed_cpus(v).format() for v in before.values() if v["claim"]}
    assert set(held) == set(uids.values()), (held, uids)
    records_before = cluster.guest.call("read_files", pattern=RECORDS)
    # The node's logs of the first boot, before the reboot loses them with /run.
    cluster.guest.call("cluster_logs", into="cluster-before-reboot")

    # A file of the test's own in /run: the witness that the node lost /run (the CDI specs
    # and the NRI socket are none: the node, started at boot, may write them again before the
    # agent first answers).
    cluster.guest.sh("sh", "-c", f"echo before > {RUN_WITNESS}")
    began = time.monotonic()
    uptime = cluster.guest.reboot()
    cluster.guest.call("sampler_start", claims=held)
    at_boot = {
        "uptime": uptime,
        "witness": cluster.guest.call("read_files", pattern=RUN_WITNESS),
    }
    print(f"\nbignode: reboot: the guest's agent answers again, {uptime:.1f} s after boot")
    reboot = Reboot(
        before=before,
        claims_before=claims_before,
        uids=uids,
        at_boot=at_boot,
        records_before=records_before,
    )
    cluster._views = None  # the node's containers are all new

    def node_ready() -> bool:
        node = cluster.get("node", NODE_NAME, namespace="")
        conditions = {c["type"]: c["status"] for c in node["status"].get("conditions", [])}
        return conditions.get("Ready") == "True"

    wait_for(node_ready, "the node Ready again after its reboot", timeout=POD_TIMEOUT, interval=1)
    wait_for(cluster.driver_ready, "the driver pod Ready again", timeout=DRIVER_TIMEOUT, interval=1)
    try:
        wait_for(
            lambda: _all_back(cluster, reboot) or None,
            "every container of the test pods back on its CPUs",
            timeout=DRIVER_TIMEOUT,
            interval=2,
        )
    finally:
        reboot.sampled = cluster.guest.call("sampler_stop") or {}
    reboot.claims_after = {claim: _allocation(cluster, claim) for claim in CLAIM_SIZES}
    reboot.records_after = cluster.guest.call("read_files", pattern=RECORDS)
    reboot.specs_after = cluster.guest.call("read_files", pattern=CDI_SPECS)
    _print_times(reboot, time.monotonic() - began)
    yield reboot


def _pinned_at(reboot: Reboot) -> dict[str, float | None]:
    """pod/container -> the guest's uptime at the first sample showing it on its CPUs."""
    by_cgroup = {view["cgroup"]: key for key, view in reboot.after.items()}
    found: dict[str, float | None] = {}
    for seen in reboot.sampled.get("containers", {}).values():
        key = by_cgroup.get(seen["cgroup"].lstrip("/"))
        if key is not None:
            found[key] = seen["pinned_at"]
    return found


def _print_times(reboot: Reboot, wall: float) -> None:
    pinned = _pinned_at(reboot)
    times = [t for t in pinned.values() if t is not None]
    last = f"{max(times):.1f} s" if len(times) == len(reboot.after) else "not all sampled"
    each = ", ".join(f"{k} {v:.1f}" for k, v in sorted(pinned.items()) if v is not None)
    sampled = reboot.sampled
    print(
        f"bignode: reboot: every test container on its CPUs {last} after boot ({each}); "
        f"{sampled.get('samples', 0)} samples from {sampled.get('started_at', 0):.1f} s, "
        f"{len(sampled.get('violations', []))} on another claim's CPUs; "
        f"{wall:.1f} s from the reboot command to all checked",
        flush=True,
    )


def test_a_reboot_loses_the_nodes_run_folder(rebooted: Reboot) -> None:
    # What the disk keeps (the claim records) is read once the node is back: at the agent's
    # first answer the node's boot may not have mounted its disk yet.
    assert rebooted.at_boot["witness"] == {}, "the node kept /run across its reboot"


def test_every_claimed_container_comes_back_on_the_cpus_it_had(rebooted: Reboot) -> None:
    for key, view in rebooted.before.items():
        if not view["claim"]:
            continue
        after = rebooted.after[key]
        assert after["pid"] != view["pid"] or after["cgroup"] != view["cgroup"], key
        assert after["cpus_allowed"] == after["cpus_effective"] == view["cpus_allowed"], key
        assert after["claim"] == view["claim"], key


def test_the_claims_stay_allocated_and_their_records_are_honoured(rebooted: Reboot) -> None:
    assert rebooted.claims_after == rebooted.claims_before
    for claim in CLAIM_SIZES:
        assert rebooted.claims_after[claim]["results"], claim
        assert rebooted.claims_after[claim]["reserved_for"], claim
    # The records the disk kept: each claim's CPUs as its containers had them before.
    held = {v["claim"]: _claimed_cpus(v) for v in rebooted.before.values() if v["claim"]}
    assert _record_cpus(rebooted.records_before) == held
    assert _record_cpus(rebooted.records_after) == held


def test_the_claims_cdi_specs_are_written_again(rebooted: Reboot) -> None:
    assert _spec_uids(rebooted.specs_after) >= set(rebooted.uids.values())


def test_unclaimed_containers_run_on_the_shared_pool(rebooted: Reboot) -> None:
    held = CPUSet()
    for view in rebooted.after.values():
        if view["claim"]:
            held = held | CPUSet.parse(view["cpus_allowed"])
    for key, view in rebooted.after.items():
        if not view["claim"]:
            assert CPUSet.parse(view["cpus_allowed"]) == CPUSet.range(0, 7) - held, key


def test_no_container_runs_on_another_claims_cpus_while_the_node_comes_back(
    rebooted: Reboot,
) -> None:
    sampled = rebooted.sampled
    assert not sampled.get("errors"), sampled.get("errors")
    assert sampled.get("samples", 0) > 0
    assert sampled["violations"] == [], sampled["violations"][:5]
    pinned = _pinned_at(rebooted)
    assert set(pinned) == set(rebooted.after), (pinned, sorted(rebooted.after))
