"""`dev claim` allocates as the scheduler would: first fit, capacity consumed, CPUs exclusive."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dracpu.core.errors import InsufficientCPUsError, InsufficientMemoryError, InvalidInputError
from dracpu.dev.scheduler import (
    Device,
    Result,
    allocate,
    allocate_claim,
    allocate_memory,
    devices_of,
    memory_devices_of,
    results_of,
)


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


MI = 1 << 20
HUGE2 = "dra.cpu/hugepages2Mi"
HUGE1G = "dra.cpu/hugepages1Gi"


def node_slice() -> dict[str, Any]:
    """Two NUMA nodes: 3 CPUs and 64Mi of 2 MiB pages on node 0, 4 CPUs and 64Mi of 2 MiB
    plus 1Gi of 1 GiB pages on node 1."""
    slice_ = grouped_slice({"cpudevnuma000": 3, "cpudevnuma001": 4})
    slice_["spec"]["devices"] += [
        {
            "name": f"memory-node-{node}",
            "attributes": {"resource.kubernetes.io/numaNode": {"int": node}},
            "capacity": {
                "dra.cpu/memory": {"value": "1Gi"},
                HUGE2: {"value": "64Mi"},
                **({HUGE1G: {"value": "1Gi"}} if node == 1 else {}),
            },
            "allowMultipleAllocations": True,
        }
        for node in (0, 1)
    ]
    return slice_


NODE = devices_of([node_slice()])
MEMORY = memory_devices_of([node_slice()])


def memory_used(node: int, **amounts: int) -> Result:
    names = {"memory": "dra.cpu/memory", "huge2": HUGE2, "huge1g": HUGE1G}
    memory = tuple(sorted((names[k], v) for k, v in amounts.items()))
    return Result("memory", "node-a", f"memory-node-{node}", None, memory)


def test_memory_devices_are_read_with_their_capacities_in_bytes() -> None:
    assert [(d.name, d.numa, dict(d.capacity)) for d in MEMORY] == [
        ("memory-node-0", 0, {"dra.cpu/memory": 1 << 30, HUGE2: 64 * MI}),
        ("memory-node-1", 1, {"dra.cpu/memory": 1 << 30, HUGE2: 64 * MI, HUGE1G: 1 << 30}),
    ]
    assert memory_devices_of([grouped_slice({"cpudevnuma000": 4})]) == []


def test_a_claim_with_memory_takes_the_memory_device_of_its_cpus_node() -> None:
    results = allocate_claim(NODE, MEMORY, [], 2, {HUGE2: 32 * MI})
    assert results == [used("cpudevnuma000", 2), memory_used(0, huge2=32 * MI)]
    # The first node where both fit: node 0 has too few CPUs, node 1 has them and the memory.
    assert allocate_claim(NODE, MEMORY, [], 4, {HUGE2: 32 * MI}) == [
        used("cpudevnuma001", 4),
        memory_used(1, huge2=32 * MI),
    ]
    # Node 0 has the CPUs but not 1Gi pages: node 1.
    assert allocate_claim(NODE, MEMORY, [], 1, {HUGE1G: 1 << 30})[1] == memory_used(
        1, huge1g=1 << 30
    )
    # Without memory, a claim is placed as before and takes no memory device.
    assert allocate_claim(NODE, MEMORY, [], 2, {}) == allocate(NODE, [], 2)


def test_memory_consumed_by_other_claims_counts_and_is_read_back_from_them() -> None:
    first = allocate_claim(NODE, MEMORY, [], 1, {HUGE2: 48 * MI}, numa=1)
    claim = claim_with(*(result.to_document() for result in first))
    assert claim["status"]["allocation"]["devices"]["results"][1] == {
        "request": "memory",
        "driver": "dra.cpu",
        "pool": "node-a",
        "device": "memory-node-1",
        "consumedCapacity": {HUGE2: "48Mi"},
    }
    allocated = results_of([claim])
    assert allocated == first
    with pytest.raises(InsufficientMemoryError) as refused:
        allocate_claim(NODE, MEMORY, allocated, 1, {HUGE2: 32 * MI}, numa=1)
    assert str(refused.value) == f"memory-node-1 {HUGE2}: wants 32Mi, 16Mi free"
    # Without --numa the scheduler goes on to node 0, which still has all of its pages.
    assert allocate_claim(NODE, MEMORY, allocated, 1, {HUGE2: 32 * MI})[1].device == (
        "memory-node-0"
    )


@pytest.mark.parametrize(
    ("memory", "allocated", "cpus", "wants", "numa", "error", "message"),
    [
        pytest.param(
            [], [], 1, {HUGE2: MI * 2}, None, InvalidInputError, "publishMemoryDevices: true",
            id="no-memory-devices",
        ),
        pytest.param(
            MEMORY, [], 1, {HUGE1G: 1 << 30}, 0, InsufficientMemoryError,
            f"memory-node-0 has no {HUGE1G}", id="no-such-pool",
        ),
        pytest.param(
            MEMORY, [], 1, {HUGE2: 66 * MI}, None, InsufficientMemoryError,
            f"no NUMA node has the CPUs and the memory (node 0: memory-node-0 {HUGE2}: wants "
            f"66Mi, 64Mi free; node 1: memory-node-1 {HUGE2}: wants 66Mi, 64Mi free)",
            id="too-much-everywhere",
        ),
        pytest.param(
            MEMORY, [used("cpudevnuma001", 4)], 1, {HUGE2: 2 * MI}, 1, InsufficientCPUsError,
            "no device has 1 free CPUs", id="cpus-of-the-node-taken",
        ),
        pytest.param(
            MEMORY, [], 1, {HUGE2: 2 * MI}, 5, InvalidInputError, "--numa 5: no device",
            id="unknown-node",
        ),
    ],
)  # fmt: skip
def test_memory_refusals(
    memory: list[Any],
    allocated: list[Result],
    cpus: int,
    wants: dict[str, int],
    numa: int | None,
    error: type[Exception],
    message: str,
) -> None:
    with pytest.raises(error) as refused:
        allocate_claim(NODE, memory, allocated, cpus, wants, numa=numa)
    assert message in str(refused.value)
    assert "\n" not in str(refused.value)


def test_memory_needs_cpu_devices_with_a_numa_node() -> None:
    spread = devices_of([individual_slice([0, 1])])
    bare = [Device(d.pool, d.name, d.node, None, d.capacity) for d in spread]
    with pytest.raises(InvalidInputError, match="carry no NUMA node attribute"):
        allocate_claim(bare, MEMORY, [], 1, {HUGE2: 2 * MI})
    # Individual CPU devices: every CPU of the claim on the memory's node.
    results = allocate_claim(spread, MEMORY, [used("cpudev000")], 1, {HUGE2: 2 * MI})
    assert results == [used("cpudev001"), memory_used(1, huge2=2 * MI)]


@given(st.lists(st.tuples(st.integers(0, 1), st.integers(1, 40)), max_size=20))
def test_memory_is_never_overcommitted(requests: list[tuple[int, int]]) -> None:
    allocated: list[Result] = []
    for node, pages in requests:
        try:
            allocated.append(allocate_memory(MEMORY, allocated, node, {HUGE2: pages * 2 * MI}))
        except InsufficientMemoryError:
            continue
    for device in MEMORY:
        taken = sum(dict(r.memory)[HUGE2] for r in allocated if r.device == device.name)
        assert taken <= dict(device.capacity)[HUGE2]
