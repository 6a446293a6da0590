"""A kube-apiserver with DRAConsumableCapacity off drops the grouped devices'
allowMultipleAllocations without a word: the plugin finds out before it publishes, writes no
ResourceSlice, and says which gate to turn on where in its log, its status and an Event on its
pod. Devices that no claim shares (individual mode) need no gate and are published.

Runs after the other modules (file order): it restarts the control plane with the gate off."""

from __future__ import annotations

import pytest
from controlplane.checks import published, slices
from harness.control_plane import CommandError, ControlPlane
from harness.driver_stack import DriverStack
from harness.kubernetes_versions import selected
from harness.waits import eventually, never, wait_for

from dracpu.core.prerequisites import CONSUMABLE_CAPACITY, DEVICE_TAINTS, RESOURCE_API
from dracpu.pb.dra_plugin.v1 import dra_plugin_pb2

# compat: on 1.34 and 1.35 this is what an API server left at its defaults does.
pytestmark = [pytest.mark.controlplane, pytest.mark.compat, pytest.mark.timeout(600)]
CONTROL_PLANE_FLAGS = ("--feature-gates=DRAConsumableCapacity=false",)
NAMESPACE = "default"
GATE_FLAG = "--feature-gates=DRAConsumableCapacity=true"
# DRADeviceTaints: alpha (off) before 1.36, beta and on by default from 1.36, GA in 1.37; the
# gates above leave it at the release's default.
TAINTS_BY_DEFAULT = tuple(int(n) for n in selected().minor.split(".")) >= (1, 36)


def _driver_pod(cp: ControlPlane, name: str, node: str) -> str:
    """A Pod object standing for the driver's pod (no kubelet runs it); returns its UID."""
    document = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "nodeName": node,
            "automountServiceAccountToken": False,
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "dra-plugin", "image": "registry.k8s.io/pause:3.10"}],
        },
    }
    # The namespace's default ServiceAccount may not be there yet on a fresh control plane.
    wait_for(lambda: cp.create(document), "the driver's pod", timeout=60, interval=0.5)
    return str(cp.get("pod", name, NAMESPACE)["metadata"]["uid"])


async def test_grouped_devices_are_not_published_and_the_gate_is_named(
    control_plane: ControlPlane, stacks: list[DriverStack], monkeypatch: pytest.MonkeyPatch
) -> None:
    node, pod = "prereq-gate-off", "dra-driver-cpu-gate-off"
    control_plane.register_node(node)
    uid = _driver_pod(control_plane, pod, node)
    # The downward-API variables the chart sets, inherited by the driver's processes.
    for key, value in (("POD_NAME", pod), ("POD_NAMESPACE", NAMESPACE), ("POD_UID", uid)):
        monkeypatch.setenv(key, value)
    stack = DriverStack(node, control_plane.kubeconfig)
    stacks.append(stack)
    # No nri-plugin here: its socket names nothing, whatever else runs on this machine.
    await stack.start(plugin_flags=("--nri-plugin-socket", str(stack.root / "none.sock")))

    async def lacking() -> dra_plugin_pb2.PluginStatus:
        status = await stack.status()
        assert not all(p.ok for p in status.prerequisites), stack.plugin_log()[-3000:]
        return status

    status = await eventually(lacking, "a prerequisite reported lacking", timeout=60, interval=0.2)
    verdicts = {p.name: p for p in status.prerequisites}
    assert verdicts[RESOURCE_API].ok
    assert not verdicts[CONSUMABLE_CAPACITY].ok
    assert GATE_FLAG in verdicts[CONSUMABLE_CAPACITY].message

    def event_messages() -> list[str]:
        try:
            return [m for m in control_plane.events(NAMESPACE, pod) if CONSUMABLE_CAPACITY in m]
        except CommandError:
            return []

    (message,) = wait_for(event_messages, "the Event on the driver's pod", timeout=60,
                          interval=0.5)  # fmt: skip
    assert GATE_FLAG in message and "kube-scheduler" in message
    (event,) = [
        e for e in control_plane.items("events", NAMESPACE)
        if e["involvedObject"].get("name") == pod
    ]  # fmt: skip
    assert (event["type"], event["reason"]) == ("Warning", "PrerequisiteMissing")
    assert event["involvedObject"]["uid"] == uid  # so kubectl describe pod shows it

    # Several more publish rounds (--poll-interval 0.5): still no slice.
    await never(
        lambda: slices(control_plane, node), "a ResourceSlice written", within=3, interval=0.5
    )
    lines = [x for x in stack.plugin_log().splitlines() if "prerequisite missing" in x]
    assert len(lines) == 1 and GATE_FLAG in lines[0]
    assert "Traceback" not in stack.plugin_log()


async def test_individual_devices_need_no_gate_and_are_published(
    control_plane: ControlPlane, stacks: list[DriverStack]
) -> None:
    node = "prereq-individual"
    control_plane.register_node(node)
    stack = DriverStack(node, control_plane.kubeconfig, config={"cpuDeviceMode": "individual"})
    stacks.append(stack)
    await stack.start()
    published(control_plane, node, 40, "individual slices")
    status = await stack.status()
    assert [(p.name, p.ok) for p in status.prerequisites] == [
        (DEVICE_TAINTS, TAINTS_BY_DEFAULT), (RESOURCE_API, True)
    ]  # fmt: skip
    assert status.last_publish_error == ""
