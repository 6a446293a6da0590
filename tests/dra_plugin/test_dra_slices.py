"""The slice plan: chunking, index names, generation rules and convergence (pure)."""

from __future__ import annotations

import itertools
import uuid
from typing import Any

import pytest
from harness.published import chunk_devices
from harness.slice_rules import device_refusals
from hypothesis import given, settings
from hypothesis import strategies as st

from dracpu.core.errors import InvalidInputError
from dracpu.dra_plugin.publishing.slices import (
    Owner,
    decode_index,
    device_json,
    encode_index,
    index_width,
    plan,
)
from dracpu.pb.allocator.v1 import allocator_pb2 as pb

OWNER = Owner("n1", "uid-n1")


def devices(count: int, *, lists: bool = False, prefix: str = "cpudev") -> pb.DeviceList:
    out = pb.DeviceList(generation=1, driver="dra.cpu", uses_list_attributes=lists)
    for i in range(count):
        d = out.devices.add(name=f"{prefix}{i:03d}")
        d.attributes["dra.cpu/cpuID"].int = i
        if lists:
            d.attributes["resource.kubernetes.io/pcieRoot"].strings.values.append("pci0000:00")
    return out


class FakeServer:
    """Applies a plan as the API server would (names from generateName, resourceVersion)."""

    def __init__(self) -> None:
        self.slices: dict[str, dict[str, Any]] = {}
        self.counter = itertools.count()

    def apply(self, todo: Any) -> None:
        for s in todo.delete:
            del self.slices[s["metadata"]["name"]]
        for s in todo.update:
            stored = dict(s, metadata=dict(s["metadata"]))
            stored["metadata"]["resourceVersion"] = str(next(self.counter))
            self.slices[s["metadata"]["name"]] = stored
        for s in todo.create:
            name = s["metadata"]["generateName"] + uuid.uuid4().hex[:5]
            meta = dict(s["metadata"], name=name, uid=name, resourceVersion="0")
            del meta["generateName"]
            self.slices[name] = dict(s, metadata=meta)

    def sync(self, desired: pb.DeviceList) -> Any:
        todo = plan(
            list(self.slices.values()),
            chunk_devices(desired),
            driver="dra.cpu",
            node="n1",
            pool="n1",
            owner=OWNER,
        )
        self.apply(todo)
        return todo


@pytest.mark.parametrize(
    ("count", "lists", "sizes"),
    [
        (0, False, [0]),
        (1, False, [1]),
        (128, False, [128]),
        (129, False, [128, 1]),
        (1024, False, [128] * 8),
        (1024, True, [64] * 16),
        (65, True, [64, 1]),
    ],
    ids=["empty-pool", "one", "full", "one-over", "1024", "1024-lists", "65-lists"],
)
def test_chunk_sizes(count: int, lists: bool, sizes: list[int]) -> None:
    assert [len(c) for c in chunk_devices(devices(count, lists=lists))] == sizes


@pytest.mark.parametrize(
    ("count", "width", "first", "last"),
    [(1, 5, "00000", "00000"), (16, 5, "00000", "0000f"), (0x100001, 6, "000000", "100000")],
    ids=["one", "sixteen", "wide"],
)
def test_index_names_sort_and_decode(count: int, width: int, first: str, last: str) -> None:
    assert index_width(count) == width
    assert encode_index(0, width) == first
    assert encode_index(count - 1, width) == last
    assert decode_index(f"{last}-dra.cpu-n1-abcde", width) == count - 1
    assert decode_index(f"{last}-dra.cpu-n1-abcde", width + 1) is None
    assert decode_index("zzzzz-dra.cpu", 5) is None
    assert decode_index("nodash", 6) is None


def test_device_json_shapes() -> None:
    d = pb.Device(name="cpudevnuma000", allow_multiple_allocations=True)
    d.attributes["dra.cpu/smtEnabled"].bool = True
    d.attributes["dra.cpu/coreType"].string = "standard"
    d.attributes["resource.kubernetes.io/pcieRoot"].strings.values.extend(["pci0000:00"])
    d.capacity["dra.cpu/cpu"] = "20"
    d.node_allocatable_resources["cpu"].capacity_key = "dra.cpu/cpu"
    d.node_allocatable_resources["cpu"].capacity_multiplier = "1"
    assert device_json(d) == {
        "name": "cpudevnuma000",
        "attributes": {
            "dra.cpu/coreType": {"string": "standard"},
            "dra.cpu/smtEnabled": {"bool": True},
            "resource.kubernetes.io/pcieRoot": {"strings": ["pci0000:00"]},
        },
        "capacity": {"dra.cpu/cpu": {"value": "20"}},
        "allowMultipleAllocations": True,
        "nodeAllocatableResources": {
            "cpu": {"mapping": {"capacityKey": "dra.cpu/cpu", "capacityMultiplier": "1"}}
        },
    }
    single = pb.Device(name="cpudev000")
    single.node_allocatable_resources["cpu"].device_multiplier = "1"
    assert device_json(single) == {
        "name": "cpudev000",
        "nodeAllocatableResources": {"cpu": {"mapping": {"deviceMultiplier": "1"}}},
    }


def test_a_string_attribute_over_the_api_servers_limit_stops_the_slices() -> None:
    fits = pb.Device(name="cpudevnuma000")
    fits.attributes["dra.cpu/cpuIDs"].string = "0-15," + ",".join(str(c) for c in range(20, 36))
    assert len(fits.attributes["dra.cpu/cpuIDs"].string) <= 64
    assert device_json(fits)["attributes"]["dra.cpu/cpuIDs"]["string"].startswith("0-15,20")
    over = pb.Device(name="cpudevnuma001")
    over.attributes["dra.cpu/cpuIDs"].string = ",".join(str(c) for c in range(0, 64, 2))
    devices = pb.DeviceList(devices=[fits, over])
    with pytest.raises(InvalidInputError) as refused:
        chunk_devices(devices)
    assert str(refused.value) == (
        "device cpudevnuma001: attribute dra.cpu/cpuIDs is 90 characters, over the API "
        "server's limit of 64; no slice is published"
    )


def test_first_publish_creates_generation_one_with_owner_and_names() -> None:
    server = FakeServer()
    todo = server.sync(devices(200))
    assert (todo.generation, len(todo.create), todo.update, todo.delete) == (1, 2, [], [])
    first = todo.create[0]
    assert first["metadata"]["generateName"] == "00000-dra.cpu-n1-"
    assert first["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "uid-n1", "controller": True}
    ]
    assert first["spec"]["pool"] == {"name": "n1", "generation": 1, "resourceSliceCount": 2}
    assert first["spec"]["nodeName"] == "n1"
    assert server.sync(devices(200)).empty


def test_one_changed_slice_keeps_the_generation_two_bump_it() -> None:
    server = FakeServer()
    server.sync(devices(256))
    one = devices(256)
    one.devices[0].attributes["dra.cpu/cpuID"].int = 999
    todo = server.sync(one)
    assert (todo.generation, len(todo.update)) == (1, 1)
    two = devices(256)
    two.devices[0].attributes["dra.cpu/cpuID"].int = 7
    two.devices[200].attributes["dra.cpu/cpuID"].int = 7
    todo = server.sync(two)
    # A bump rewrites every slice with the new generation.
    assert (todo.generation, len(todo.update)) == (2, 2)
    assert {s["spec"]["pool"]["generation"] for s in server.slices.values()} == {2}


def test_growing_pool_bumps_and_shrinking_deletes() -> None:
    server = FakeServer()
    server.sync(devices(100))
    todo = server.sync(devices(300))
    assert (todo.generation, len(todo.create), len(todo.update)) == (2, 2, 1)
    todo = server.sync(devices(10, prefix="cpudevnuma"))
    assert len(todo.delete) == 2 and len(server.slices) == 1
    (only,) = server.slices.values()
    assert only["spec"]["pool"]["resourceSliceCount"] == 1


def test_strangers_and_older_generations_are_deleted() -> None:
    server = FakeServer()
    server.sync(devices(10))
    server.slices["junk"] = {
        "metadata": {"name": "junk", "uid": "junk", "resourceVersion": "1"},
        "spec": {"pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1}},
    }
    server.slices["00000-dra.cpu-n1-old"] = {
        "metadata": {"name": "00000-dra.cpu-n1-old", "uid": "old", "resourceVersion": "1"},
        "spec": {"pool": {"name": "n1", "generation": 0, "resourceSliceCount": 1}},
    }
    todo = server.sync(devices(10))
    assert sorted(s["metadata"]["name"] for s in todo.delete) == ["00000-dra.cpu-n1-old", "junk"]
    assert todo.generation == 1 and not todo.create and not todo.update


def test_without_a_node_object_there_is_no_owner_reference() -> None:
    todo = plan([], chunk_devices(devices(1)), driver="dra.cpu", node="n1", pool="n1", owner=None)
    assert "ownerReferences" not in todo.create[0]["metadata"]
    assert todo.create[0]["metadata"]["generateName"] == "00000-dra.cpu-"


@settings(max_examples=60, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.integers(0, 400), st.booleans(), st.integers(0, 3)), min_size=1, max_size=6
    )
)
def test_any_sequence_of_device_sets_converges(steps: list[tuple[int, bool, int]]) -> None:
    server = FakeServer()
    last_generation = 0
    for count, lists, seed in steps:
        desired = devices(count, lists=lists)
        for d in desired.devices[: seed * 3]:
            d.attributes["dra.cpu/cpuID"].int += 1000 * seed
        todo = server.sync(desired)
        assert todo.generation >= last_generation
        last_generation = todo.generation
        stored = sorted(server.slices.values(), key=lambda s: s["metadata"]["name"])
        assert [d for s in stored for d in s["spec"]["devices"]] == [
            device_json(d) for d in desired.devices
        ]
        assert {s["spec"]["pool"]["generation"] for s in stored} == {todo.generation}
        assert {s["spec"]["pool"]["resourceSliceCount"] for s in stored} == {len(stored)}
        assert server.sync(desired).empty


async def test_slices_named_by_the_api_server_for_long_node_names_plan_to_nothing(
    tmp_path: Any,
) -> None:
    from dracpu.dev.apiserver import fake_apiserver
    from dracpu.dra_plugin.cluster.apiserver import KubernetesAPI

    node = "n" * 80
    owner = Owner(node, "uid")
    todo = plan(
        [], chunk_devices(devices(300)), driver="dra.cpu", node=node, pool=node, owner=owner
    )
    with fake_apiserver(tmp_path) as (_, kubeconfig):
        api = KubernetesAPI(str(kubeconfig))
        try:
            for obj in todo.create:
                await api.create_slice(obj)
            stored = await api.list_slices("dra.cpu", node)
        finally:
            await api.aclose()
    names = sorted(s["metadata"]["name"] for s in stored)
    assert [len(n) for n in names] == [63, 63, 63]
    assert [n[:6] for n in names] == ["00000-", "00001-", "00002-"]
    # Truncated names still match their positions: nothing to do on the next pass.
    again = plan(stored, chunk_devices(devices(300)), driver="dra.cpu", node=node, pool=node,
                 owner=owner)  # fmt: skip
    assert again.empty


def test_a_memory_device_is_a_device_the_api_server_stores() -> None:
    d = pb.Device(name="memory-node-1", allow_multiple_allocations=True)
    d.attributes["resource.kubernetes.io/numaNode"].int = 1
    d.capacity["dra.cpu/memory"] = "7680Mi"
    d.capacity["dra.cpu/hugepages2Mi"] = "512Mi"
    d.capacity["dra.cpu/hugepages1Gi"] = "0"
    document = device_json(d)
    assert document == {
        "name": "memory-node-1",
        "attributes": {"resource.kubernetes.io/numaNode": {"int": 1}},
        "capacity": {
            "dra.cpu/hugepages1Gi": {"value": "0"},
            "dra.cpu/hugepages2Mi": {"value": "512Mi"},
            "dra.cpu/memory": {"value": "7680Mi"},
        },
        "allowMultipleAllocations": True,
    }
    assert device_refusals(document) == []
