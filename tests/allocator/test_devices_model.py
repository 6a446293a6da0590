"""The published devices, per mode, as the reference driver's attribute tables define them
(docs/user/device-attributes.md; pkg/device/builder.go)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from dracpu.allocator.domain.devices import (
    DeviceOptions,
    GroupBy,
    Mode,
    NodeAllocatableMapping,
    build_devices,
)
from dracpu.core.cpuset import CPUSet
from dracpu.core.machine import Machine

Machines = Callable[[str], Machine]

NUMA = "resource.kubernetes.io/numaNode"
PCIE = "resource.kubernetes.io/pcieRoot"


def test_numa_grouping_on_the_two_socket_xeon(machines: Machines) -> None:
    # xeon-2s-ht: socket s holds cores 10s..10s+9, threads n and n+20; one NUMA node per socket.
    model = build_devices(machines("xeon-2s-ht"), DeviceOptions(reserved=CPUSet.parse("0,20")))
    assert [d.name for d in model.devices] == ["cpudevnuma000", "cpudevnuma001"]
    first, second = model.devices
    assert first.cpus == CPUSet.parse("1-9,21-29")
    assert second.cpus == CPUSet.parse("10-19,30-39")
    assert dict(first.attributes) == {
        NUMA: 0,
        "dra.cpu/socketID": 0,
        "dra.cpu/smtEnabled": True,
        "dra.cpu/numCPUs": 18,
        "dra.net/numaNode": 0,
        "dra.cpu/numaNodeID": 0,
        "dra.cpu/numIsolatedCPUs": 0,
        "dra.cpu/numNohzFullCPUs": 0,
    }
    assert dict(second.attributes)["dra.cpu/socketID"] == 1
    assert dict(first.capacity) == {"dra.cpu/cpu": "18"}
    assert dict(second.capacity) == {"dra.cpu/cpu": "20"}
    assert first.allow_multiple_allocations and second.allow_multiple_allocations
    assert not first.node_allocatable
    assert not model.uses_list_attributes


def test_socket_grouping_on_epyc_nps4(machines: Machines) -> None:
    model = build_devices(machines("epyc-2s-nps4"), DeviceOptions(group_by="socket"))
    assert [d.name for d in model.devices] == ["cpudevsocket000", "cpudevsocket001"]
    assert model.devices[0].cpus == CPUSet.parse("0-63,128-191")
    assert dict(model.devices[1].attributes) == {
        "dra.cpu/socketID": 1,
        "dra.cpu/numCPUs": 128,
        "dra.cpu/smtEnabled": True,
        "dra.cpu/numIsolatedCPUs": 0,
        "dra.cpu/numNohzFullCPUs": 0,
    }
    assert dict(model.devices[1].capacity) == {"dra.cpu/cpu": "128"}


def test_epyc_nps4_has_eight_numa_devices_with_their_socket(machines: Machines) -> None:
    model = build_devices(machines("epyc-2s-nps4"), DeviceOptions())
    assert [d.name for d in model.devices] == [f"cpudevnuma{n:03d}" for n in range(8)]
    assert [d.attributes["dra.cpu/socketID"] for d in model.devices] == [0] * 4 + [1] * 4
    assert model.devices[1].cpus == CPUSet.parse("16-31,144-159")


def test_machine_grouping_publishes_size_smt_and_what_an_external_allocator_reads(
    machines: Machines,
) -> None:
    options = DeviceOptions(group_by="machine", reserved=CPUSet.parse("0-1"))
    assert options.allocator == "external"
    model = build_devices(machines("single-4c8t"), options)
    (device,) = model.devices
    assert device.name == "cpudevmachine"
    assert device.cpus == CPUSet.parse("2-7")
    assert dict(device.attributes) == {
        "dra.cpu/smtEnabled": True,
        "dra.cpu/numCPUs": 6,
        "dra.cpu/numIsolatedCPUs": 0,
        "dra.cpu/numNohzFullCPUs": 0,
        "dra.cpu/cpuIDs": "2-7",
        "dra.cpu/smtLayout": "0-7>4",
    }
    assert dict(device.capacity) == {"dra.cpu/cpu": "6"}
    assert model.group_by == "machine"


def test_a_fully_reserved_numa_node_publishes_no_device(machines: Machines) -> None:
    options = DeviceOptions(reserved=CPUSet.parse("0-9,20-29"))
    model = build_devices(machines("xeon-2s-ht"), options)
    assert [d.name for d in model.devices] == ["cpudevnuma001"]


@pytest.mark.parametrize(
    ("fixture", "reserved", "expected_order"),
    [
        # Siblings n / n+20: each core's threads get consecutive device numbers.
        ("xeon-2s-ht", "", [0, 20, 1, 21, 2, 22]),
        # A reserved thread leaves its sibling alone; cores stay ordered by their first CPU,
        # so core 0's remaining thread (20) comes after core 9 (19, 39).
        ("xeon-2s-ht", "0", [1, 21, 2, 22]),
        ("smt4", "", [0, 1, 2, 3, 4, 5]),
        ("smt4", "1", [0, 2, 3, 4, 5, 6]),
        # CPUs 4, 5, 9 offline: cores keep their online threads, ordered by first online CPU.
        ("offline-middle", "", [0, 8, 1, 2, 10, 3, 11, 6, 14, 7, 15, 12, 13]),
    ],
    ids=[
        "xeon-split-siblings",
        "xeon-reserved-thread",
        "smt4-adjacent",
        "smt4-reserved",
        "offline",
    ],
)
def test_individual_numbering_keeps_siblings_together(
    machines: Machines, fixture: str, reserved: str, expected_order: list[int]
) -> None:
    options = DeviceOptions(mode="individual", reserved=CPUSet.parse(reserved))
    model = build_devices(machines(fixture), options)
    head = model.devices[: len(expected_order)]
    assert [d.name for d in head] == [f"cpudev{n:03d}" for n in range(len(expected_order))]
    assert [d.cpus.first() for d in head] == expected_order


def test_individual_reserved_core_sibling_is_numbered_by_its_own_id(machines: Machines) -> None:
    model = build_devices(
        machines("xeon-2s-ht"), DeviceOptions(mode="individual", reserved=CPUSet([0]))
    )
    order = [d.cpus.first() for d in model.devices]
    assert len(order) == 39
    assert order.index(20) == order.index(39) + 1
    assert model.devices[-1].name == "cpudev038"


def test_individual_attributes(machines: Machines) -> None:
    model = build_devices(machines("xeon-2s-ht"), DeviceOptions(mode="individual"))
    device = model.devices[3]  # CPU 21: second thread of socket 0's core id 1
    assert device.cpus == CPUSet([21])
    assert dict(device.attributes) == {
        NUMA: 0,
        "dra.cpu/socketID": 0,
        "dra.cpu/smtEnabled": True,
        "dra.cpu/cacheL3ID": 0,
        "dra.cpu/coreType": "standard",
        "dra.cpu/coreID": 1,
        "dra.cpu/cpuID": 21,
        "dra.net/numaNode": 0,
        "dra.cpu/numaNodeID": 0,
        "dra.cpu/isolated": False,
        "dra.cpu/nohzFull": False,
    }
    assert not device.capacity
    assert not device.allow_multiple_allocations
    assert model.group_by == ""


def test_individual_core_types_on_hybrid(machines: Machines) -> None:
    model = build_devices(machines("intel-hybrid"), DeviceOptions(mode="individual"))
    types = {d.attributes["dra.cpu/coreType"] for d in model.devices}
    assert types == {"p-core", "e-core"}
    assert model.devices[0].attributes["dra.cpu/smtEnabled"] is True


@pytest.mark.parametrize(
    ("mode", "group_by", "device", "roots"),
    [
        ("grouped", "numanode", "cpudevnuma000", ("pci0000:00", "pci0000:3a")),
        ("grouped", "numanode", "cpudevnuma001", ("pci0000:80", "pci0000:ae")),
        ("grouped", "socket", "cpudevsocket001", ("pci0000:80", "pci0000:ae")),
        (
            "grouped",
            "machine",
            "cpudevmachine",
            ("pci0000:00", "pci0000:3a", "pci0000:80", "pci0000:ae"),
        ),
        ("individual", "numanode", "cpudev000", ("pci0000:00", "pci0000:3a")),
    ],
    ids=["numa0", "numa1", "socket1", "machine", "individual"],
)
def test_pcie_roots_only_when_exposed(
    machines: Machines, mode: Mode, group_by: GroupBy, device: str, roots: tuple[str, ...]
) -> None:
    machine = machines("xeon-2s-ht")
    shown = build_devices(
        machine, DeviceOptions(mode=mode, group_by=group_by, expose_pcie_roots=True)
    )
    hidden = build_devices(machine, DeviceOptions(mode=mode, group_by=group_by))
    assert shown.by_name[device].attributes[PCIE] == roots
    assert shown.uses_list_attributes
    assert PCIE not in hidden.by_name[device].attributes
    assert not hidden.uses_list_attributes


def test_no_pcie_attribute_when_the_machine_has_no_roots(machines: Machines) -> None:
    model = build_devices(machines("smt4"), DeviceOptions(expose_pcie_roots=True))
    assert PCIE not in model.devices[0].attributes


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("grouped", NodeAllocatableMapping(capacity_key="dra.cpu/cpu", capacity_multiplier="1")),
        ("individual", NodeAllocatableMapping(device_multiplier="1")),
    ],
)
def test_node_allocatable_mapping(
    machines: Machines, mode: Mode, expected: NodeAllocatableMapping
) -> None:
    model = build_devices(
        machines("single-4c8t"), DeviceOptions(mode=mode, node_allocatable_mapping=True)
    )
    assert all(dict(d.node_allocatable) == {"cpu": expected} for d in model.devices)


def test_memory_devices_map_each_capacity_onto_the_node_resource_of_the_same_memory(
    machines: Machines,
) -> None:
    """With the mapping on, a memory device maps its memory and each hugepage pool it has
    onto the kubelet's resource for them (`memory`, `hugepages-<size>`), byte for byte; the
    CPU devices keep their own mapping."""
    machine = machines("numa4-hugepages")
    model = build_devices(
        machine, DeviceOptions(publish_memory=True, node_allocatable_mapping=True)
    )
    memory = [d for d in model.devices if d.kind == "memory"]
    assert len(memory) == 4
    for device in memory:
        mapped = {
            r: (m.capacity_key, m.capacity_multiplier) for r, m in device.node_allocatable.items()
        }
        expected = {"memory": ("dra.cpu/memory", "1")}
        for key in device.capacity:
            if key.startswith("dra.cpu/hugepages"):
                expected[f"hugepages-{key.removeprefix('dra.cpu/hugepages')}"] = (key, "1")
        assert mapped == expected
    assert set(memory[0].node_allocatable) == {"memory", "hugepages-2Mi", "hugepages-1Gi"}
    assert set(memory[1].node_allocatable) == {"memory", "hugepages-2Mi"}
    cpu_mapping = NodeAllocatableMapping(capacity_key="dra.cpu/cpu", capacity_multiplier="1")
    assert all(
        dict(d.node_allocatable) == {"cpu": cpu_mapping}
        for d in model.devices
        if d.kind != "memory"
    )
    without = build_devices(machine, DeviceOptions(publish_memory=True))
    assert all(not d.node_allocatable for d in without.devices)
    assert without.fingerprint != model.fingerprint


def test_fingerprint_follows_the_published_facts(machines: Machines) -> None:
    machine = machines("xeon-2s-ht")
    base = build_devices(machine, DeviceOptions())
    assert build_devices(machine, DeviceOptions()).fingerprint == base.fingerprint
    assert (
        build_devices(machine, DeviceOptions(reserved=CPUSet([0]))).fingerprint != base.fingerprint
    )
    assert (
        build_devices(machine, DeviceOptions(expose_pcie_roots=True)).fingerprint
        != base.fingerprint
    )
