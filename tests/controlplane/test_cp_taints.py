"""Device taints against the real API server and kube-scheduler (Kubernetes 1.37: DRADeviceTaints
and DRADeviceTaintRules GA, on by default): a device with offline CPUs carries the driver's
`dra.cpu/offline` taint as the API server stores it, the scheduler keeps a claim that does not
tolerate it off the device and allocates one that does; an operator's DeviceTaintRule on one
NUMA node's device does the same, and both lift.

The node runs the xeon-2s-ht fixture, grouped by NUMA node: cpudevnuma000 = CPUs 0-9,20-29,
cpudevnuma001 = CPUs 10-19,30-39. Claims select NUMA node 1 by the standard numaNode
attribute, so the tainted device is the only one they could get.

kube-scheduler 1.37.2 does not name a device taint anywhere in its refusal: the structured
allocator skips a device whose taint the request does not tolerate without a word or an error
(taintPreventsAllocation, allocator_stable.go; its caller logs only `Device not usable` with the
device's ID, at -v=7), and the DRA plugin's Filter reports "cannot allocate all claims"
(dynamicresources.go), which becomes the pod's PodScheduled message and its FailedScheduling
Event. The tests quote that whole message, and the same claim with a toleration allocated at
once shows the taint was what stood in the way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from controlplane.checks import (
    DEVICE_CLASS,
    NAMESPACE,
    allocation,
    claim,
    devices,
    pod,
    slices,
    stays_unchanged,
)
from harness.control_plane import ControlPlane
from harness.driver_stack import DriverStack
from harness.hotplug import Hotplug
from harness.waits import wait_for

pytestmark = [pytest.mark.controlplane, pytest.mark.timeout(600)]

NODE = "taints-grouped"
NUMA1 = 'device.attributes["resource.kubernetes.io"].numaNode == 1'
OFFLINE_TOLERATION = {"key": "dra.cpu/offline", "operator": "Exists", "effect": "NoSchedule"}
RULE_KEY = "example.com/maintenance"
# What kube-scheduler 1.37.2's DRA plugin says of a node none of whose devices can satisfy the
# pod's claims (dynamicresources.go, Filter).
UNSCHEDULABLE = "cannot allocate all claims"


@pytest.fixture(scope="module")
def node(control_plane: ControlPlane) -> Iterator[DriverStack]:
    control_plane.apply(DEVICE_CLASS)
    control_plane.register_node(NODE)
    stack = DriverStack(NODE, control_plane.kubeconfig)
    asyncio.run(stack.start("--topology-refresh", "0.5"))
    wait_for(lambda: len(devices(slices(control_plane, NODE))) == 2, "two devices", timeout=60)
    yield stack
    stack.close()


def _taints(cp: ControlPlane) -> dict[str, list[dict[str, Any]]]:
    return {d["name"]: d.get("taints") or [] for d in devices(slices(cp, NODE))}


def _numa1_claim(name: str, tolerations: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    exactly: dict[str, Any] = {
        "allocationMode": "ExactCount", "count": 1,
        "selectors": [{"cel": {"expression": NUMA1}}],
        "capacity": {"requests": {"dra.cpu/cpu": "2"}},
    }  # fmt: skip
    if tolerations:
        exactly["tolerations"] = tolerations
    return claim(name, exactly)


def _unschedulable_reason(cp: ControlPlane, name: str) -> str:
    conditions = (cp.get("pod", name, NAMESPACE).get("status") or {}).get("conditions") or []
    for condition in conditions:
        if condition["type"] == "PodScheduled" and condition.get("reason") == "Unschedulable":
            return str(condition.get("message", ""))
    return ""


def _refusal(cp: ControlPlane) -> str:
    """kube-scheduler 1.37.2's whole message for a pod bound by its node selector to a node
    that cannot allocate its claim: FitError.Error (pkg/scheduler/framework/types.go), a
    histogram of the nodes' reasons (this node the DRA plugin's, the others the tier registered
    NodeAffinity's), then the preemption's own (defaultpreemption PostFilter)."""
    nodes = len(cp.items("nodes"))
    reasons = [f"1 {UNSCHEDULABLE}"]
    if nodes > 1:
        reasons.append(f"{nodes - 1} node(s) didn't match Pod's node affinity/selector")
    return (
        f"0/{nodes} nodes are available: {', '.join(sorted(reasons))}. preemption: "
        f"0/{nodes} nodes are available: {nodes} Preemption is not helpful for scheduling."
    )


def _refused(cp: ControlPlane, name: str) -> str:
    """The scheduler's refusal of pod `name`, once both its PodScheduled condition and its
    FailedScheduling Event (what `kubectl describe pod` lists) say it; they say the same."""
    reason = wait_for(lambda: _unschedulable_reason(cp, name), "the scheduler's refusal",
                      timeout=60, interval=0.2)  # fmt: skip
    (event, *_) = wait_for(lambda: cp.events(NAMESPACE, name), "the FailedScheduling Event",
                           timeout=60, interval=0.2)  # fmt: skip
    assert event == reason, (event, reason)
    return reason


def _delete(cp: ControlPlane, *names: str) -> None:
    """No kubelet runs these pods: they go at once (forced), their claims once released."""
    for name in names:
        cp.kubectl("delete", "pod", name, "-n", NAMESPACE, "--grace-period=0", "--force",
                   "--ignore-not-found")  # fmt: skip
        cp.kubectl("delete", "resourceclaim", name, "-n", NAMESPACE, "--wait=false",
                   "--ignore-not-found")  # fmt: skip


async def test_a_device_with_offline_cpus_keeps_new_claims_off_unless_they_tolerate_it(
    control_plane: ControlPlane, node: DriverStack
) -> None:
    cp = control_plane
    hotplug = Hotplug(node.sysfs)
    hotplug.offline([12, 32], online="0-11,13-31,33-39")
    try:
        found = wait_for(
            lambda: (t := _taints(cp))["cpudevnuma001"] and t, "NUMA node 1's device tainted",
            timeout=60, interval=0.2,
        )  # fmt: skip
        (taint,) = found["cpudevnuma001"]
        assert (taint["key"], taint["value"], taint["effect"]) == (
            "dra.cpu/offline", "12_32", "NoSchedule"
        )  # fmt: skip
        assert taint["timeAdded"]  # as the plugin wrote it: the server kept it
        assert found["cpudevnuma000"] == []
        await stays_unchanged(cp, NODE)  # the server's copy equals ours: no rewrite loop

        cp.create(_numa1_claim("offline-plain"), pod("offline-plain", "offline-plain", NODE))
        reason = _refused(cp, "offline-plain")
        assert reason == _refusal(cp)  # the whole of it: no word of the taint
        assert allocation(cp, "offline-plain") is None

        cp.create(_numa1_claim("offline-tolerating", [OFFLINE_TOLERATION]),
                  pod("offline-tolerating", "offline-tolerating", NODE))  # fmt: skip
        allocated = wait_for(lambda: allocation(cp, "offline-tolerating"),
                             "the claim allocated", timeout=60, interval=0.2)  # fmt: skip
        (result,) = allocated["devices"]["results"]
        assert result["device"] == "cpudevnuma001"
        assert allocation(cp, "offline-plain") is None
    finally:
        _delete(cp, "offline-plain", "offline-tolerating")
        hotplug.online([12, 32])
    wait_for(lambda: _taints(cp) == {"cpudevnuma000": [], "cpudevnuma001": []},
             "the taint lifted with the CPUs back", timeout=60, interval=0.2)  # fmt: skip


def _rule(effect: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": "drain-numa1"},
        "spec": {
            "deviceSelector": {"driver": "dra.cpu", "pool": NODE, "device": "cpudevnuma001"},
            "taint": {"key": RULE_KEY, "value": "numa1", "effect": effect},
        },
    }


def test_a_device_taint_rule_on_one_numa_node_keeps_new_claims_to_the_other(
    control_plane: ControlPlane, node: DriverStack
) -> None:
    cp = control_plane
    cp.create(_rule("NoSchedule"))
    try:
        cp.create(_numa1_claim("drained-plain"), pod("drained-plain", "drained-plain", NODE))
        assert _refused(cp, "drained-plain") == _refusal(cp)  # nor is the rule

        # Without the NUMA selector a claim goes to the other device.
        two = {"requests": {"dra.cpu/cpu": "2"}}
        anywhere = claim("drained-any", {"allocationMode": "ExactCount", "count": 1,
                                         "capacity": two})  # fmt: skip
        cp.create(anywhere, pod("drained-any", "drained-any", NODE))
        allocated = wait_for(lambda: allocation(cp, "drained-any"), "the claim allocated",
                             timeout=60, interval=0.2)  # fmt: skip
        assert [r["device"] for r in allocated["devices"]["results"]] == ["cpudevnuma000"]

        toleration = {"key": RULE_KEY, "operator": "Equal", "value": "numa1",
                      "effect": "NoSchedule"}  # fmt: skip
        cp.create(_numa1_claim("drained-tolerating", [toleration]),
                  pod("drained-tolerating", "drained-tolerating", NODE))  # fmt: skip
        allocated = wait_for(lambda: allocation(cp, "drained-tolerating"),
                             "the claim allocated", timeout=60, interval=0.2)  # fmt: skip
        assert [r["device"] for r in allocated["devices"]["results"]] == ["cpudevnuma001"]
        # The rule is the operator's: the driver's slices never carry it.
        assert _taints(cp) == {"cpudevnuma000": [], "cpudevnuma001": []}
    finally:
        _delete(cp, "drained-plain", "drained-any", "drained-tolerating")
        cp.kubectl("delete", "devicetaintrule", "drain-numa1", "--ignore-not-found")
