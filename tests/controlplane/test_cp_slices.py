"""ResourceSlices in every device mode, validated by a real kube-apiserver with its default
feature gates; what the plugin does when the server lacks an optional field."""

from __future__ import annotations

from pathlib import Path

import pytest
from controlplane.checks import devices, published, slices, stays_unchanged
from harness.control_plane import ControlPlane
from harness.driver_stack import DriverStack
from harness.waits import eventually

from dracpu.topology.fixtures import write_fixture

pytestmark = [pytest.mark.controlplane, pytest.mark.timeout(600)]

# mode id -> (config fields, device names)
MODES = {
    "numanode": ({}, ["cpudevnuma000", "cpudevnuma001"]),
    "socket": ({"groupBy": "socket"}, ["cpudevsocket000", "cpudevsocket001"]),
    "machine": ({"groupBy": "machine", "allocator": "external"}, ["cpudevmachine"]),
    "individual": ({"cpuDeviceMode": "individual"}, [f"cpudev{i:03d}" for i in range(40)]),
}


@pytest.mark.compat
@pytest.mark.parametrize("mode", list(MODES))
async def test_every_mode_is_accepted_by_the_api_server(
    control_plane: ControlPlane, stacks: list[DriverStack], mode: str
) -> None:
    fields, expected = MODES[mode]
    node = f"slices-{mode}"
    uid = control_plane.register_node(node)
    stack = DriverStack(node, control_plane.kubeconfig, config=fields)
    stacks.append(stack)
    await stack.start()
    found = published(control_plane, node, len(expected), f"{mode} slices in the API server")
    assert [d["name"] for d in devices(found)] == expected
    for s in found:
        assert s["metadata"]["ownerReferences"] == [
            {"apiVersion": "v1", "kind": "Node", "name": node, "uid": uid, "controller": True}
        ]
        assert s["spec"]["pool"]["name"] == node
    grouped = mode != "individual"
    for d in devices(found):
        assert d["attributes"]["dra.cpu/smtEnabled"] == {"bool": True}
        assert ("capacity" in d) == grouped
        assert d.get("allowMultipleAllocations", False) == grouped
    status = await stack.status()
    assert (status.slice_sync, status.node_uid, status.last_publish_error) == ("watch", uid, "")
    await stays_unchanged(control_plane, node)


async def test_1024_individual_devices_in_eight_slices(
    control_plane: ControlPlane, stacks: list[DriverStack], tmp_path: Path
) -> None:
    node = "slices-1024"
    control_plane.register_node(node, cpus=1024)
    sysfs = write_fixture("big-1024", Path(tmp_path) / "sys")
    stack = DriverStack(node, control_plane.kubeconfig, sysfs=sysfs,
                        config={"cpuDeviceMode": "individual"})  # fmt: skip
    stacks.append(stack)
    await stack.start()
    found = published(control_plane, node, 1024, "1024 devices", timeout=120)
    assert [len(s["spec"]["devices"]) for s in found] == [128] * 8
    assert [d["name"] for d in devices(found)] == [f"cpudev{i:03d}" for i in range(1024)]
    await stays_unchanged(control_plane, node)


async def test_list_attributes_refused_without_the_gate_are_left_out_and_reported(
    control_plane: ControlPlane, stacks: list[DriverStack]
) -> None:
    node = "gates-lists"
    control_plane.register_node(node)
    stack = DriverStack(node, control_plane.kubeconfig, config={"cpuDeviceMode": "individual"})
    stacks.append(stack)
    await stack.start("--expose-pcie-roots")
    found = published(control_plane, node, 40, "slices published without list attributes")
    assert all("resource.kubernetes.io/pcieRoot" not in d["attributes"] for d in devices(found))
    status = await stack.status()
    (missing,) = status.missing_api_features
    assert (missing.name, missing.feature_gate) == ("listTypeAttributes", "DRAListTypeAttributes")
    # The server's own words, not only its status code.
    assert "422 Unprocessable Entity: ResourceSlice.resource.k8s.io" in missing.reason
    assert "pcieRoot" in missing.reason
    assert 'dra_cpu_api_feature_missing{feature="listTypeAttributes"} 1.0' in await stack.metrics()
    log = stack.plugin_log()
    assert log.count("the API server lacks an optional ResourceSlice feature") == 1
    await stays_unchanged(control_plane, node)


async def test_a_mapping_dropped_without_the_gate_is_noticed_once_and_not_rewritten(
    control_plane: ControlPlane, stacks: list[DriverStack]
) -> None:
    node = "gates-mapping"
    control_plane.register_node(node)
    stack = DriverStack(node, control_plane.kubeconfig,
                        config={"publishNodeAllocatableResourceMapping": True})  # fmt: skip
    stacks.append(stack)
    await stack.start()
    published(control_plane, node, 2, "slices")

    async def reported() -> bool:
        status = await stack.status()
        missing = ",".join(m.name for m in status.missing_api_features)
        assert missing == "nodeAllocatableResources", f"{missing!r}; {stack.plugin_log()[-3000:]}"
        return True

    await eventually(reported, "the mapping reported missing", timeout=30, interval=0.2)
    (missing,) = (await stack.status()).missing_api_features
    assert missing.feature_gate == "DRANodeAllocatableResources"
    assert "dropped spec.devices[].nodeAllocatableResources" in missing.reason
    assert all("nodeAllocatableResources" not in d for d in devices(slices(control_plane, node)))
    await stays_unchanged(control_plane, node)


async def test_memory_devices_beside_the_cpu_devices_are_accepted_by_the_api_server(
    control_plane: ControlPlane, stacks: list[DriverStack], tmp_path: Path
) -> None:
    """publishMemoryDevices on a machine of four NUMA nodes, each with its memory and hugepage
    pools: the API server takes every slice, the CPU devices are the numanode ones, and each
    memory device keeps its capacities and NUMA node as published."""
    node = "slices-memory"
    control_plane.register_node(node, cpus=32)
    sysfs = write_fixture("numa4-hugepages", Path(tmp_path) / "sys")
    stack = DriverStack(node, control_plane.kubeconfig, sysfs=sysfs,
                        config={"publishMemoryDevices": True})  # fmt: skip
    stacks.append(stack)
    await stack.start()
    cpu_devices = [f"cpudevnuma{n:03d}" for n in range(4)]
    memory_devices = [f"memory-node-{n}" for n in range(4)]
    found = published(control_plane, node, 8, "CPU and memory devices in the API server")
    by_name = {d["name"]: d for d in devices(found)}
    assert sorted(by_name) == sorted(cpu_devices + memory_devices)
    for n, name in enumerate(memory_devices):
        device = by_name[name]
        assert device["attributes"]["resource.kubernetes.io/numaNode"] == {"int": n}
        assert device["allowMultipleAllocations"] is True
        assert "dra.cpu/memory" in device["capacity"]
    assert "dra.cpu/hugepages1Gi" in by_name["memory-node-0"]["capacity"]
    assert "dra.cpu/hugepages1Gi" not in by_name["memory-node-1"]["capacity"]
    status = await stack.status()
    assert status.last_publish_error == ""
    await stays_unchanged(control_plane, node)
