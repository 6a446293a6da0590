"""A kube-apiserver with DRADeviceTaints off (GA in 1.37, but still a gate that can be turned
off) drops `taints` from every device it stores: the plugin finds out before it publishes, says
so once as the DRADeviceTaints prerequisite (its log, its status, an Event on its pod), and
publishes without taints: a device with offline CPUs is published with what it has left, and
no taint.

Runs after the other modules (file order): it restarts the control plane with the gate off
(DRADeviceTaintRules with it: it depends on DRADeviceTaints)."""

from __future__ import annotations

import pytest
from controlplane.checks import devices, slices, stays_unchanged
from harness.control_plane import CommandError, ControlPlane
from harness.driver_stack import DriverStack
from harness.hotplug import Hotplug
from harness.waits import eventually, wait_for

from dracpu.core.prerequisites import DEVICE_TAINTS
from dracpu.pb.dra_plugin.v1 import dra_plugin_pb2

pytestmark = [pytest.mark.controlplane, pytest.mark.timeout(600)]
CONTROL_PLANE_FLAGS = ("--feature-gates=DRADeviceTaints=false,DRADeviceTaintRules=false",)
NAMESPACE = "default"
GATE_FLAG = "--feature-gates=DRADeviceTaints=true"


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
    wait_for(lambda: cp.create(document), "the driver's pod", timeout=60, interval=0.5)
    return str(cp.get("pod", name, NAMESPACE)["metadata"]["uid"])


async def test_a_server_without_device_taints_is_said_once_and_gets_untainted_slices(
    control_plane: ControlPlane, stacks: list[DriverStack], monkeypatch: pytest.MonkeyPatch
) -> None:
    cp = control_plane
    node, pod = "taints-gate-off", "dra-driver-cpu-taints-off"
    cp.register_node(node)
    uid = _driver_pod(cp, pod, node)
    for key, value in (("POD_NAME", pod), ("POD_NAMESPACE", NAMESPACE), ("POD_UID", uid)):
        monkeypatch.setenv(key, value)
    stack = DriverStack(node, cp.kubeconfig)
    stacks.append(stack)
    await stack.start(
        "--topology-refresh", "0.5",
        plugin_flags=("--nri-plugin-socket", str(stack.root / "none.sock")),
    )  # fmt: skip

    async def said() -> dra_plugin_pb2.PluginStatus:
        status = await stack.status()
        assert any(p.name == DEVICE_TAINTS and not p.ok for p in status.prerequisites)
        return status

    status = await eventually(said, "DRADeviceTaints reported missing", timeout=60, interval=0.2)
    (verdict,) = [p for p in status.prerequisites if not p.ok]
    assert GATE_FLAG in verdict.message and "published without taints" in verdict.message
    wait_for(lambda: len(devices(slices(cp, node))) == 2, "both devices published", timeout=60)

    def event_messages() -> list[str]:
        try:
            return [m for m in cp.events(NAMESPACE, pod) if DEVICE_TAINTS in m]
        except CommandError:
            return []

    (message,) = wait_for(event_messages, "the Event on the driver's pod", timeout=60,
                          interval=0.5)  # fmt: skip
    assert GATE_FLAG in message

    Hotplug(stack.sysfs).offline([12, 32], online="0-11,13-31,33-39")

    def shrunk() -> dict[str, str]:
        found = {d["name"]: d for d in devices(slices(cp, node))}
        return {n: d["capacity"]["dra.cpu/cpu"]["value"] for n, d in found.items()}

    wait_for(lambda: shrunk() == {"cpudevnuma000": "20", "cpudevnuma001": "18"},
             "NUMA node 1's device published with 18 CPUs", timeout=60, interval=0.2)  # fmt: skip
    assert not [d for d in devices(slices(cp, node)) if d.get("taints")]
    await stays_unchanged(cp, node)  # no rewrite loop over a dropped field
    status = await stack.status()
    assert [(m.name, m.feature_gate) for m in status.missing_api_features] == [
        ("taints", "DRADeviceTaints")
    ]
    lines = [x for x in stack.plugin_log().splitlines() if "prerequisite missing" in x]
    assert len(lines) == 1 and DEVICE_TAINTS in lines[0]
    assert "Traceback" not in stack.plugin_log()
