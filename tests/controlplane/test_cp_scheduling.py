"""The real kube-scheduler allocating from the plugin's slices: capacity from a grouped device,
a CEL selector on the standard numaNode attribute with a matchAttribute constraint, refusal of
what cannot fit; then NodePrepareResources (the kubelet stand-in) reading the real claims."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from controlplane.checks import (
    DEVICE_CLASS,
    NAMESPACE,
    allocation,
    claim,
    complete,
    devices,
    pod,
    slices,
)
from harness.control_plane import ControlPlane
from harness.driver_stack import DriverStack
from harness.waits import wait_for

from dracpu.core.cpuset import CPUSet
from dracpu.dev.kubelet_sim import Claim

pytestmark = [pytest.mark.controlplane, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def grouped(control_plane: ControlPlane) -> Iterator[DriverStack]:
    import asyncio

    control_plane.apply(DEVICE_CLASS)
    node = "sched-grouped"
    control_plane.register_node(node)
    stack = DriverStack(node, control_plane.kubeconfig)
    asyncio.run(stack.start())
    wait_for(lambda: complete(slices(control_plane, node), 2), "slices", timeout=60, interval=0.2)
    yield stack
    stack.close()


@pytest.fixture(scope="module")
def individual(control_plane: ControlPlane) -> Iterator[DriverStack]:
    import asyncio

    control_plane.apply(DEVICE_CLASS)
    node = "sched-individual"
    control_plane.register_node(node)
    stack = DriverStack(node, control_plane.kubeconfig, config={"cpuDeviceMode": "individual"})
    asyncio.run(stack.start())
    wait_for(lambda: complete(slices(control_plane, node), 40), "slices", timeout=60, interval=0.2)
    yield stack
    stack.close()


def cdi_cpus(stack: DriverStack, uid: str) -> CPUSet:
    """The cpuset the allocator wrote into the claim's CDI spec."""
    spec = json.loads((stack.root / "cdi" / f"dra.k8s.io-cpu_claim-{uid}.json").read_text())
    env = [e for d in spec["devices"] for e in d["containerEdits"].get("env", [])]
    env += spec.get("containerEdits", {}).get("env", [])
    (value,) = {e.split("=", 1)[1] for e in env if e.startswith("DRA_CPUSET_")}
    return CPUSet.parse(value)


@pytest.mark.compat
async def test_capacity_of_a_grouped_device_is_allocated_and_prepared(
    control_plane: ControlPlane, grouped: DriverStack
) -> None:
    cp = control_plane
    cp.create(claim("cpus-4", {"allocationMode": "ExactCount", "count": 1,
                               "capacity": {"requests": {"dra.cpu/cpu": "4"}}}),
              pod("pinned-4", "cpus-4", grouped.node))  # fmt: skip
    allocated = wait_for(lambda: allocation(cp, "cpus-4"), "allocation", timeout=60, interval=0.2)
    (result,) = allocated["devices"]["results"]
    assert result["driver"] == "dra.cpu" and result["pool"] == grouped.node
    assert result["device"] in ("cpudevnuma000", "cpudevnuma001")
    assert result["consumedCapacity"] == {"dra.cpu/cpu": "4"}
    assert result.get("shareID")
    assert cp.get("pod", "pinned-4", NAMESPACE)["spec"]["nodeName"] == grouped.node

    uid = cp.get("resourceclaim", "cpus-4", NAMESPACE)["metadata"]["uid"]
    kubelet = await grouped.kubelet()
    try:
        prepared = await kubelet.prepare([Claim(NAMESPACE, "cpus-4", uid)])
        assert prepared[uid].error == ""
        (device,) = prepared[uid].devices
        assert (device.pool_name, device.device_name) == (grouped.node, result["device"])
        assert device.share_id == result["shareID"]
        cpus = cdi_cpus(grouped, uid)
        numa = int(result["device"][-3:])
        assert len(cpus) == 4
        assert cpus.issubset(CPUSet.parse("0-9,20-29" if numa == 0 else "10-19,30-39"))
        assert await kubelet.unprepare([Claim(NAMESPACE, "cpus-4", uid)]) == {uid: ""}
    finally:
        await kubelet.close()


@pytest.mark.compat
async def test_a_numa_selector_and_match_attribute_pick_devices_of_one_node(
    control_plane: ControlPlane, individual: DriverStack
) -> None:
    cp = control_plane
    selector = 'device.attributes["resource.kubernetes.io"].numaNode == 1'
    cp.create(
        claim("cpus-4-numa1",
              {"allocationMode": "ExactCount", "count": 4,
               "selectors": [{"cel": {"expression": selector}}]},
              [{"requests": ["cpus"], "matchAttribute": "dra.cpu/socketID"}]),
        pod("pinned-numa1", "cpus-4-numa1", individual.node),
    )  # fmt: skip
    allocated = wait_for(
        lambda: allocation(cp, "cpus-4-numa1"), "allocation", timeout=60, interval=0.2
    )
    chosen = [r["device"] for r in allocated["devices"]["results"]]
    assert len(chosen) == 4
    published = {d["name"]: d for d in devices(slices(cp, individual.node))}
    for name in chosen:
        attributes = published[name]["attributes"]
        assert attributes["resource.kubernetes.io/numaNode"] == {"int": 1}
        assert attributes["dra.cpu/socketID"] == {"int": 1}

    uid = cp.get("resourceclaim", "cpus-4-numa1", NAMESPACE)["metadata"]["uid"]
    kubelet = await individual.kubelet()
    try:
        prepared = await kubelet.prepare([Claim(NAMESPACE, "cpus-4-numa1", uid)])
        assert prepared[uid].error == ""
        assert sorted(d.device_name for d in prepared[uid].devices) == sorted(chosen)
        cpus = cdi_cpus(individual, uid)
        ids = [published[n]["attributes"]["dra.cpu/cpuID"]["int"] for n in chosen]
        assert cpus == CPUSet.parse(",".join(map(str, ids)))
        assert cpus.issubset(CPUSet.parse("10-19,30-39"))  # NUMA node 1 of the fixture
    finally:
        await kubelet.close()


def test_a_claim_that_cannot_fit_is_refused_by_the_scheduler(
    control_plane: ControlPlane, grouped: DriverStack
) -> None:
    cp = control_plane
    # 24 CPUs from one device: every NUMA node of the machine has 20.
    cp.create(claim("cpus-24", {"allocationMode": "ExactCount", "count": 1,
                                "capacity": {"requests": {"dra.cpu/cpu": "24"}}}),
              pod("pinned-24", "cpus-24", grouped.node))  # fmt: skip

    def unschedulable() -> str | None:
        conditions = cp.get("pod", "pinned-24", NAMESPACE).get("status", {}).get("conditions")
        for c in conditions or []:
            if c["type"] == "PodScheduled" and c["status"] == "False":
                return f"{c.get('reason')}: {c.get('message')}"
        return None

    reason = wait_for(unschedulable, "the scheduler's verdict", timeout=60, interval=0.2)
    assert reason.startswith("Unschedulable: ")
    assert "cannot allocate all claims" in reason
    assert allocation(cp, "cpus-24") is None
    assert any("cannot allocate all claims" in m for m in cp.events(NAMESPACE, "pinned-24"))
