"""With the optional gates on (DRAListTypeAttributes, DRANodeAllocatableResources) the same
fields are accepted; a mapping from a Node that does not declare the feature is refused by the
server, which the plugin reports with the server's message and publishes without.

Runs last (file order): it restarts the control plane with other apiserver flags."""

from __future__ import annotations

from pathlib import Path

import pytest
from controlplane.checks import devices, published, stays_unchanged
from harness.control_plane import ControlPlane
from harness.driver_stack import DriverStack
from harness.waits import eventually

from dracpu.topology.fixtures import write_fixture

pytestmark = [pytest.mark.controlplane, pytest.mark.timeout(600)]
CONTROL_PLANE_FLAGS = (
    "--feature-gates=DRAListTypeAttributes=true,DRANodeAllocatableResources=true",
)


async def test_list_attributes_are_accepted_with_the_gate(
    control_plane: ControlPlane, stacks: list[DriverStack]
) -> None:
    node = "gates-on-lists"
    control_plane.register_node(node)
    stack = DriverStack(node, control_plane.kubeconfig, config={"cpuDeviceMode": "individual"})
    stacks.append(stack)
    await stack.start("--expose-pcie-roots")
    found = published(control_plane, node, 40, "slices")
    assert all("strings" in d["attributes"]["resource.kubernetes.io/pcieRoot"]
               for d in devices(found))  # fmt: skip
    assert len((await stack.status()).missing_api_features) == 0


async def test_a_mapping_is_kept_when_the_node_declares_the_feature(
    control_plane: ControlPlane, stacks: list[DriverStack]
) -> None:
    node = "gates-on-declared"
    control_plane.register_node(node, declared=["DRANodeAllocatableResources"])
    stack = DriverStack(node, control_plane.kubeconfig,
                        config={"publishNodeAllocatableResourceMapping": True})  # fmt: skip
    stacks.append(stack)
    await stack.start()
    found = published(control_plane, node, 2, "slices")
    assert all("nodeAllocatableResources" in d for d in devices(found))
    assert len((await stack.status()).missing_api_features) == 0
    await stays_unchanged(control_plane, node)


async def test_memory_devices_keep_their_mapping_onto_memory_and_hugepages(
    control_plane: ControlPlane, stacks: list[DriverStack], tmp_path: Path
) -> None:
    """publishMemoryDevices with the mapping, on a node that declares the feature: the API
    server takes each memory device's mapping of `memory` and `hugepages-<size>` onto its own
    capacities, as published."""
    node = "gates-on-memory"
    control_plane.register_node(node, cpus=32, declared=["DRANodeAllocatableResources"])
    sysfs = write_fixture("numa4-hugepages", Path(tmp_path) / "sys")
    config = {"publishMemoryDevices": True, "publishNodeAllocatableResourceMapping": True}
    stack = DriverStack(node, control_plane.kubeconfig, sysfs=sysfs, config=config)
    stacks.append(stack)
    await stack.start()
    found = published(control_plane, node, 8, "CPU and memory devices with their mappings")
    by_name = {d["name"]: d for d in devices(found)}

    def mapped(name: str) -> dict[str, str]:
        resources = by_name[name]["nodeAllocatableResources"]
        return {r: m["mapping"]["capacityKey"] for r, m in resources.items()}

    assert mapped("memory-node-0") == {
        "memory": "dra.cpu/memory",
        "hugepages-2Mi": "dra.cpu/hugepages2Mi",
        "hugepages-1Gi": "dra.cpu/hugepages1Gi",
    }
    assert mapped("memory-node-1") == {
        "memory": "dra.cpu/memory",
        "hugepages-2Mi": "dra.cpu/hugepages2Mi",
    }
    assert mapped("cpudevnuma000") == {"cpu": "dra.cpu/cpu"}
    assert len((await stack.status()).missing_api_features) == 0
    await stays_unchanged(control_plane, node)


async def test_a_mapping_refused_for_an_undeclared_node_is_left_out_and_reported(
    control_plane: ControlPlane, stacks: list[DriverStack]
) -> None:
    node = "gates-on-undeclared"
    control_plane.register_node(node)
    stack = DriverStack(node, control_plane.kubeconfig,
                        config={"publishNodeAllocatableResourceMapping": True})  # fmt: skip
    stacks.append(stack)
    await stack.start()
    found = published(control_plane, node, 2, "slices without the mapping")
    assert all("nodeAllocatableResources" not in d for d in devices(found))

    async def reported() -> bool:
        return bool((await stack.status()).missing_api_features)

    await eventually(reported, "the mapping reported missing", timeout=30, interval=0.2)
    (missing,) = (await stack.status()).missing_api_features
    assert missing.name == "nodeAllocatableResources"
    assert missing.reason.startswith("create resourceslice: 403 Forbidden: ")
    assert stack.plugin_log().count("the API server lacks an optional ResourceSlice feature") == 1
