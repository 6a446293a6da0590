"""ResourceSlice publication into the API-server fake, in every device mode.

Real topology, allocator and dra-plugin processes; the fake (`dracpu.dev.apiserver`, a process)
plays the API server.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from harness.dra_plugin_node import NODE, NODE_UID, Node
from harness.waits import eventually

pytestmark = pytest.mark.timeout(180)


def check_pool(slices: list[dict[str, Any]], per_slice: int) -> list[str]:
    """Assert the pool invariants; return the device names in slice order."""
    assert slices, "no slices"
    generations = {s["spec"]["pool"]["generation"] for s in slices}
    assert len(generations) == 1, generations
    width = max(5, len(f"{len(slices) - 1:x}"))
    names: list[str] = []
    by_index = sorted(slices, key=lambda s: s["metadata"]["name"])
    for index, s in enumerate(by_index):
        spec = s["spec"]
        assert spec["driver"] == "dra.cpu"
        assert spec["nodeName"] == NODE
        assert spec["pool"]["name"] == NODE
        assert spec["pool"]["resourceSliceCount"] == len(slices)
        assert s["metadata"]["name"].startswith(f"{index:0{width}x}-dra.cpu-{NODE}-")
        assert s["metadata"]["ownerReferences"] == [
            {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": NODE_UID, "controller": True}
        ]
        assert len(spec["devices"]) <= per_slice
        names.extend(d["name"] for d in spec["devices"])
    assert len(names) == len(set(names))
    return names


async def published(node: Node, predicate: Any, what: str) -> list[dict[str, Any]]:
    async def check() -> list[dict[str, Any]] | None:
        slices = node.slices()
        return slices if slices and predicate(slices) else None

    result: list[dict[str, Any]] = await eventually(check, what, timeout=30)
    return result


def device_count(slices: list[dict[str, Any]]) -> int:
    return sum(len(s["spec"]["devices"]) for s in slices)


# mode id -> (config fields, expected device names). In individual mode the first shared CPU
# (the shared-pool floor, minSharedCPUs 1) is never published, so cpudev000 is missing.
MODES = {
    "numanode": ({}, ["cpudevnuma000", "cpudevnuma001"]),
    "socket": ({"groupBy": "socket"}, ["cpudevsocket000", "cpudevsocket001"]),
    "machine": ({"groupBy": "machine", "allocator": "external"}, ["cpudevmachine"]),
    "individual": ({"cpuDeviceMode": "individual"}, [f"cpudev{i:03d}" for i in range(1, 40)]),
    "individual-reserved": (
        {"cpuDeviceMode": "individual", "reservedCPUs": "0,20"},
        [f"cpudev{i:03d}" for i in range(1, 38)],
    ),
}


@pytest.mark.parametrize("mode", list(MODES))
async def test_every_mode_publishes_one_pool(node: Node, mode: str) -> None:
    fields, expected = MODES[mode]
    node.configure(**fields)
    await node.start()
    slices = await published(node, lambda s: device_count(s) == len(expected), f"{mode} slices")
    assert check_pool(slices, 128) == expected
    grouped = "individual" not in mode
    for device in (d for s in slices for d in s["spec"]["devices"]):
        assert device["attributes"]["dra.cpu/smtEnabled"] == {"bool": True}
        if grouped:
            assert device["allowMultipleAllocations"] is True
            assert set(device["capacity"]) == {"dra.cpu/cpu"}
        else:
            assert "capacity" not in device


async def test_1024_individual_devices_are_chunked_and_a_mode_change_removes_them(
    big_sysfs: Path,
) -> None:
    node = Node(sysfs=big_sysfs)
    try:
        node.configure(cpuDeviceMode="individual")
        await node.start()
        # Every CPU but the shared-pool floor's (cpudev000).
        slices = await published(node, lambda s: device_count(s) == 1023, "1023 devices")
        assert len(slices) == 8
        assert check_pool(slices, 128) == [f"cpudev{i:03d}" for i in range(1, 1024)]
        first_generation = slices[0]["spec"]["pool"]["generation"]
        first_name = min(s["metadata"]["name"] for s in slices)

        # Grouped by NUMA node now: the eight old slices must go, one new slice remains.
        node.stop("allocator")
        node.configure(groupBy="numanode")
        await node.start_allocator()
        slices = await published(
            node,
            lambda s: len(s) == 1 and device_count(s) == 8,
            "one grouped slice and no stale ones",
        )
        assert check_pool(slices, 128) == [f"cpudevnuma{i:03d}" for i in range(8)]
        # As the upstream controller does: slice 0 is updated in place and the rest deleted;
        # with no creation and a single update the pool generation is kept.
        assert slices[0]["metadata"]["name"] == first_name
        assert slices[0]["spec"]["pool"]["generation"] == first_generation
    finally:
        node.close()


async def test_list_attributes_halve_the_slice_size(big_sysfs: Path) -> None:
    node = Node(sysfs=big_sysfs)
    try:
        node.configure(cpuDeviceMode="individual")
        await node.start("--expose-pcie-roots")
        slices = await published(node, lambda s: device_count(s) == 1023, "1023 devices")
        assert len(slices) == 16
        check_pool(slices, 64)
        first = slices[0]["spec"]["devices"][0]
        assert "strings" in first["attributes"]["resource.kubernetes.io/pcieRoot"]
    finally:
        node.close()


async def test_deleted_and_edited_slices_are_repaired_and_other_drivers_kept(
    node: Node,
) -> None:
    node.configure(cpuDeviceMode="individual")
    # Left over from an earlier run (older generation, another naming) and another driver's.
    stale = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "dra.cpu-node-a-x1"},
        "spec": {
            "driver": "dra.cpu",
            "nodeName": NODE,
            "pool": {"name": NODE, "generation": 3, "resourceSliceCount": 1},
            "devices": [{"name": "cpudevnuma000"}],
        },
    }
    foreign = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "gpu-slice"},
        "spec": {
            "driver": "gpu.example.com",
            "nodeName": NODE,
            "pool": {"name": NODE, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "gpu0"}],
        },
    }
    node.cluster.create_slice(stale)
    node.cluster.create_slice(foreign)
    await node.start()

    def ours(slices: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [s for s in slices if s["spec"]["driver"] == "dra.cpu"]

    slices = await published(
        node, lambda s: device_count(ours(s)) == 39 and len(ours(s)) == 1, "stale slice replaced"
    )
    (mine,) = ours(slices)
    assert mine["spec"]["pool"]["generation"] == 4  # above everything seen before
    assert any(s["metadata"]["name"] == "gpu-slice" for s in slices)

    # Someone deletes our slice: the plugin publishes it again.
    node.cluster.delete_slice(mine["metadata"]["name"])
    slices = await published(node, lambda s: len(ours(s)) == 1, "slice recreated")
    (mine,) = ours(slices)
    check_pool([mine], 128)

    # Someone edits it: the plugin puts the devices back.
    mine["spec"]["devices"] = mine["spec"]["devices"][:3]
    node.cluster.replace_slice(mine)
    slices = await published(node, lambda s: device_count(ours(s)) == 39, "edited slice repaired")
    assert any(s["metadata"]["name"] == "gpu-slice" for s in slices)


async def test_plugin_started_before_the_allocator_publishes_once_it_is_up(node: Node) -> None:
    from dracpu.core import rpc
    from dracpu.pb.dra_plugin.v1 import dra_plugin_pb2, dra_plugin_pb2_grpc

    await node.start_topology()
    await node.start_plugin()

    async def view() -> dra_plugin_pb2.PluginStatus:
        async with rpc.channel(node.sock("plugin")) as chan:
            stub = dra_plugin_pb2_grpc.DRAPluginViewStub(chan)
            return await stub.GetStatus(dra_plugin_pb2.GetStatusRequest(), timeout=5)

    async def failing() -> bool:
        return "allocator" in (await view()).last_publish_error

    await eventually(failing, "the publish error naming the allocator", timeout=30)
    assert node.slices() == []
    await node.start_allocator()
    slices = await published(node, lambda s: device_count(s) == 2, "slices after the allocator")
    check_pool(slices, 128)

    async def recovered() -> bool:
        status = await view()
        return status.last_publish_error == "" and status.slice_count == 1

    await eventually(recovered, "status without the error", timeout=30)
    assert (await view()).published_generation >= 1
