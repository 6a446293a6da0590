"""The kubelet's own CPU Manager and Memory Manager: while the kubelet's checkpoint under its
root names a policy that places containers (`static`, `Static`), the dra-plugin publishes no
device, withdraws those it published, says why in one line (log, status, the verdict that
becomes an Event on its pod), and publishes again once the kubelet runs `none`/`None`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from harness.dra_plugin_node import Node
from harness.waits import eventually

from dracpu.core import rpc
from dracpu.core.prerequisites import CPU_MANAGER, MEMORY_MANAGER, Prerequisites
from dracpu.dra_plugin.kubelet.resource_managers import ResourceManagers, policy_of
from dracpu.pb.dra_plugin.v1 import dra_plugin_pb2, dra_plugin_pb2_grpc

pytestmark = pytest.mark.timeout(120)

# The checkpoints as kubelet 1.37 writes them (cm/cpumanager/state, cm/memorymanager/state).
CPU_STATIC = {"policyName": "static", "defaultCpuSet": "1", "checksum": 3316254871}
CPU_NONE = {"policyName": "none", "defaultCpuSet": "", "checksum": 1353318690}
MEMORY_STATIC = {"policyName": "Static", "machineState": {}, "checksum": 1}
MEMORY_NONE = {"policyName": "None", "machineState": {}, "checksum": 2}


def _write(root: Path, cpu: object = None, memory: object = None) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for name, content in (("cpu_manager_state", cpu), ("memory_manager_state", memory)):
        path = root / name
        if content is None:
            path.unlink(missing_ok=True)
        else:
            path.write_text(content if isinstance(content, str) else json.dumps(content))


@pytest.mark.parametrize(
    ("cpu", "memory", "allowed", "missing"),
    [
        pytest.param(CPU_NONE, MEMORY_NONE, True, [], id="both-none"),
        pytest.param(None, None, True, [], id="no-checkpoints-decide-nothing"),
        pytest.param(CPU_STATIC, MEMORY_NONE, False, [CPU_MANAGER], id="static-cpu-manager"),
        pytest.param(CPU_NONE, MEMORY_STATIC, False, [MEMORY_MANAGER], id="static-memory"),
        pytest.param(CPU_STATIC, MEMORY_STATIC, False, [CPU_MANAGER, MEMORY_MANAGER],
                     id="both-static"),
        pytest.param("{not json", MEMORY_NONE, True, [], id="garbled-decides-nothing"),
        pytest.param({"entries": {}}, None, True, [], id="no-policy-name-decides-nothing"),
    ],
)  # fmt: skip
def test_the_verdict_of_each_kubelet(
    tmp_path: Path, cpu: object, memory: object, allowed: bool, missing: list[str]
) -> None:
    _write(tmp_path, cpu, memory)
    managers = ResourceManagers(tmp_path, Prerequisites())
    assert managers.allow_publishing() is allowed
    found = {p.name: p.message for p in managers.prerequisites.all() if not p.ok}
    assert sorted(found) == missing
    for message in found.values():
        assert "\n" not in message
        assert "no ResourceSlices are published until then" in message


def test_the_message_names_the_setting_the_file_and_the_steps(tmp_path: Path) -> None:
    _write(tmp_path, CPU_STATIC, MEMORY_STATIC)
    managers = ResourceManagers(tmp_path, Prerequisites())
    managers.allow_publishing()
    cpu, memory = (managers.prerequisites.get(n) for n in (CPU_MANAGER, MEMORY_MANAGER))
    assert cpu is not None and memory is not None
    assert "CPU Manager with policy static (cpuManagerPolicy" in cpu.message
    assert "set cpuManagerPolicy: none" in cpu.message
    assert "Memory Manager with policy Static (memoryManagerPolicy" in memory.message
    assert "set memoryManagerPolicy: None" in memory.message
    assert str(tmp_path / "cpu_manager_state") in cpu.message
    assert str(tmp_path / "memory_manager_state") in memory.message
    for message in (cpu.message, memory.message):
        for step in ("drain the node", "stop the kubelet", "remove cpu_manager_state and "
                     "memory_manager_state", "start the kubelet", "uncordon the node",
                     "Moving a node off the CPU Manager"):  # fmt: skip
            assert step in message


def test_a_removed_checkpoint_holds_back_until_the_kubelet_writes_none(tmp_path: Path) -> None:
    _write(tmp_path, CPU_STATIC)
    managers = ResourceManagers(tmp_path, Prerequisites())
    assert managers.allow_publishing() is False
    _write(tmp_path, None)  # the operator removed it; the kubelet has not started yet
    assert managers.allow_publishing() is False
    _write(tmp_path, CPU_NONE)
    assert managers.allow_publishing() is True
    verdict = managers.prerequisites.get(CPU_MANAGER)
    assert verdict is not None and verdict.ok


def test_policy_of_refuses_what_is_not_a_checkpoint() -> None:
    assert policy_of(json.dumps(CPU_STATIC)) == "static"
    for text, words in (("[]", "no policyName"), ("{", "not JSON"), ('{"policyName": ""}',
                        "no policyName")):  # fmt: skip
        with pytest.raises(ValueError, match=words):
            policy_of(text)


# ---- the plugin process ----------------------------------------------------------------------


async def _status(node: Node) -> dra_plugin_pb2.PluginStatus:
    async with rpc.channel(node.sock("plugin")) as chan:
        stub = dra_plugin_pb2_grpc.DRAPluginViewStub(chan)
        reply: dra_plugin_pb2.PluginStatus = await stub.GetStatus(
            dra_plugin_pb2.GetStatusRequest(), timeout=10
        )
        return reply


async def test_a_static_kubelet_gets_no_slice_until_it_runs_none(node: Node) -> None:
    _write(node.kubelet_root, CPU_STATIC, MEMORY_NONE)
    await node.start()

    async def held_back() -> dra_plugin_pb2.PluginStatus | None:
        status = await _status(node)
        return status if any(not p.ok for p in status.prerequisites) else None

    status = await eventually(held_back, "the kubelet's policy in the plugin's status")
    assert {(p.name, p.ok) for p in status.prerequisites} == {
        (CPU_MANAGER, False), (MEMORY_MANAGER, True)
    }  # fmt: skip
    assert "cpuManagerPolicy" in status.last_publish_error
    assert node.slices() == []
    lines = [x for x in node.log("plugin").read_text().splitlines() if "prerequisite missing" in x]
    assert len(lines) == 1 and "set cpuManagerPolicy: none" in lines[0]

    _write(node.kubelet_root, None, MEMORY_NONE)  # removed, the kubelet not started again yet
    _write(node.kubelet_root, CPU_NONE, MEMORY_NONE)
    await eventually(node.slices, "slices once the kubelet runs none")
    status = await _status(node)
    assert all(p.ok for p in status.prerequisites)
    assert "prerequisite met" in node.log("plugin").read_text()


async def test_slices_are_withdrawn_when_the_kubelet_turns_static(started: Node) -> None:
    node = started
    _write(node.kubelet_root, CPU_NONE, MEMORY_NONE)
    await eventually(node.slices, "slices while the kubelet runs none")
    _write(node.kubelet_root, CPU_NONE, MEMORY_STATIC)
    await eventually(lambda: node.slices() == [], "slices withdrawn")
    assert "ResourceSlices withdrawn" in node.log("plugin").read_text()
    _write(node.kubelet_root, CPU_NONE, MEMORY_NONE)
    await eventually(node.slices, "slices published again")
