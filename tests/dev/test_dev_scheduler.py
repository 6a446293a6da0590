"""`dev claim` allocates as the scheduler would: first fit, capacity consumed, CPUs exclusive."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dracpu.core.errors import InsufficientCPUsError, InvalidInputError
from dracpu.dev.scheduler import Device, Result, allocate, devices_of, results_of


def grouped_slice(capacities: dict[str, int], *, generation: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "spec": {
            "driver": "dra.cpu",
            "nodeName": "node-a",
            "pool": {"name": "node-a", "generation": generation, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": name,
                    "attributes": {"resource.kubernetes.io/numaNode": {"int": index}},
                    "capacity": {"dra.cpu/cpu": {"value": str(capacity)}},
                    "allowMultipleAllocations": True,
                }
                for index, (name, capacity) in enumerate(capacities.items())
            ],
        },
    }


def individual_slice(numa_of: list[int]) -> dict[str, Any]:
    return {
        "spec": {
            "driver": "dra.cpu",
            "nodeName": "node-a",
            "pool": {"name": "node-a", "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": f"cpudev{index:03d}",
                    "attributes": {"dra.cpu/numaNodeID": {"int": numa}},
                }
                for index, numa in enumerate(numa_of)
            ],
        }
    }


def claim_with(*results: dict[str, Any]) -> dict[str, Any]:
    return {"status": {"allocation": {"devices": {"results": list(results)}}}}


NUMA2 = devices_of([grouped_slice({"cpudevnuma000": 4, "cpudevnuma001": 8})])
CPUS4 = devices_of([individual_slice([0, 0, 1, 1])])


def used(device: str, cpus: int | None = None) -> Result:
    return Result("cpus", "node-a", device, cpus)


@pytest.mark.parametrize(
    ("devices", "allocated", "cpus", "numa", "expected"),
    [
        pytest.param(NUMA2, [], 2, None, [used("cpudevnuma000", 2)], id="grouped-first-fit"),
        pytest.param(NUMA2, [], 4, None, [used("cpudevnuma000", 4)], id="grouped-exact-fit"),
        pytest.param(NUMA2, [], 5, None, [used("cpudevnuma001", 5)], id="grouped-too-big-first"),
        pytest.param(
            NUMA2,
            [used("cpudevnuma000", 3)],
            2,
            None,
            [used("cpudevnuma001", 2)],
            id="grouped-consumed-capacity-counts",
        ),
        pytest.param(NUMA2, [], 1, 1, [used("cpudevnuma001", 1)], id="grouped-numa-filter"),
        pytest.param(CPUS4, [], 2, None, [used("cpudev000"), used("cpudev001")], id="individual"),
        pytest.param(
            CPUS4,
            [used("cpudev000")],
            2,
            None,
            [used("cpudev001"), used("cpudev002")],
            id="individual-skips-taken",
        ),
        pytest.param(CPUS4, [], 2, 1, [used("cpudev002"), used("cpudev003")], id="individual-numa"),
    ],
)
def test_allocation(
    devices: list[Device],
    allocated: list[Result],
    cpus: int,
    numa: int | None,
    expected: list[Result],
) -> None:
    assert allocate(devices, allocated, cpus, numa=numa) == expected


@pytest.mark.parametrize(
    ("devices", "allocated", "cpus", "numa", "error", "message"),
    [
        pytest.param(NUMA2, [], 9, None, InsufficientCPUsError, "no device has 9 free", id="big"),
        pytest.param(
            NUMA2,
            [used("cpudevnuma001", 8)],
            5,
            None,
            InsufficientCPUsError,
            "cpudevnuma000=4, cpudevnuma001=0",
            id="full",
        ),
        pytest.param(CPUS4, [], 5, None, InsufficientCPUsError, "4 CPU devices", id="individual"),
        pytest.param(NUMA2, [], 1, 7, InvalidInputError, "nodes: [0, 1]", id="unknown-numa"),
        pytest.param([], [], 1, None, InsufficientCPUsError, "no dra.cpu devices", id="none"),
        pytest.param(NUMA2, [], 0, None, InvalidInputError, "positive", id="zero"),
    ],
)
def test_refusals(
    devices: list[Device],
    allocated: list[Result],
    cpus: int,
    numa: int | None,
    error: type[Exception],
    message: str,
) -> None:
    with pytest.raises(error, match=message.replace("[", r"\[").replace("]", r"\]")):
        allocate(devices, allocated, cpus, numa=numa)


def test_only_the_newest_generation_of_a_pool_counts() -> None:
    stale = grouped_slice({"cpudevnuma000": 99}, generation=1)
    current = grouped_slice({"cpudevnuma000": 4}, generation=2)
    other_driver = {"spec": {**current["spec"], "driver": "gpu.example.com"}}
    devices = devices_of([stale, current, other_driver])
    assert [(d.name, d.capacity) for d in devices] == [("cpudevnuma000", 4)]


def test_results_of_reads_only_our_driver() -> None:
    claims = [
        claim_with(
            {
                "request": "cpus",
                "driver": "dra.cpu",
                "pool": "node-a",
                "device": "cpudevnuma000",
                "consumedCapacity": {"dra.cpu/cpu": "3"},
            },
            {"request": "gpu", "driver": "gpu.example.com", "pool": "p", "device": "gpu0"},
        ),
        {"status": {}},
    ]
    assert results_of(claims) == [used("cpudevnuma000", 3)]


@given(st.lists(st.integers(min_value=1, max_value=6), max_size=20))
def test_grouped_capacity_is_never_overcommitted(requests: list[int]) -> None:
    allocated: list[Result] = []
    for cpus in requests:
        try:
            allocated += allocate(NUMA2, allocated, cpus)
        except InsufficientCPUsError:
            continue
    for device in NUMA2:
        consumed = sum(r.consumed or 0 for r in allocated if r.device == device.name)
        assert consumed <= (device.capacity or 0)


@given(st.lists(st.integers(min_value=1, max_value=3), max_size=10))
def test_individual_devices_go_to_one_claim_only(requests: list[int]) -> None:
    allocated: list[Result] = []
    for cpus in requests:
        try:
            allocated += allocate(CPUS4, allocated, cpus)
        except InsufficientCPUsError:
            continue
    names = [result.device for result in allocated]
    assert len(names) == len(set(names))


def memory_device(node: int) -> dict[str, Any]:
    return {
        "name": f"memory-node-{node}",
        "attributes": {"resource.kubernetes.io/numaNode": {"int": node}},
        "capacity": {"dra.cpu/memory": {"value": "8Gi"}, "dra.cpu/hugepages2Mi": {"value": "1Gi"}},
        "allowMultipleAllocations": True,
    }


@pytest.mark.parametrize("layout", ["grouped", "individual"])
def test_memory_devices_are_never_taken_for_cpus(layout: str) -> None:
    # What the CPU DeviceClass selects: a device with the memory capacity is not a CPU device.
    slice_ = grouped_slice({"cpudevnuma000": 4}) if layout == "grouped" else individual_slice([0])
    slice_["spec"]["devices"] += [memory_device(0), memory_device(1)]
    devices = devices_of([slice_])
    assert [d.name for d in devices] == ["cpudevnuma000" if layout == "grouped" else "cpudev000"]
    (taken,) = allocate(devices, [], 1, numa=0)
    assert taken.device == devices[0].name
