"""Memory devices (publishMemoryDevices): one per NUMA node with memory, after the CPU devices,
with the node's memory and hugepage pools as consumable capacity; the CPU devices are those
published without them; and a prepare naming one is refused in one line, memory not yet being
allocatable.

Machine: numa4-hugepages (4 NUMA nodes of 4 two-thread cores; node memory and pools:
0: 16 GiB, 512 x 2 MiB and 2 x 1 GiB; 1: 8 GiB, 256 x 2 MiB; 2: 16 GiB less 4 MiB, an empty
2 MiB pool and 4 x 1 GiB; 3: 12 GiB, 1024 x 2 MiB).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from dracpu.allocator import claims
from dracpu.allocator.claims import NodeState, PrepareInput, ResultInput
from dracpu.allocator.domain.device_health import HealthBook, assess
from dracpu.allocator.domain.devices import DeviceOptions, build_devices
from dracpu.allocator.live.node import NodeAllocator
from dracpu.core.cpuset import CPUSet
from dracpu.core.errors import InvalidInputError
from dracpu.core.machine import Machine
from dracpu.core.memory import HugepagePool, NodeMemory, memory_fingerprint

Machines = Callable[[str], Machine]
NUMA = "resource.kubernetes.io/numaNode"
GIB = 1 << 30
MIB = 1 << 20

# Every device mode, as the configuration spells it.
MODES: dict[str, dict[str, Any]] = {
    "numanode": {},
    "socket": {"group_by": "socket"},
    "machine": {"group_by": "machine", "allocator": "external"},
    "numanode-external": {"allocator": "external"},
    "individual": {"mode": "individual"},
}


def test_one_device_per_node_with_its_memory_and_pools(machines: Machines) -> None:
    model = build_devices(machines("numa4-hugepages"), DeviceOptions(publish_memory=True))
    memory = [d for d in model.devices if d.kind == "memory"]
    assert [d.name for d in memory] == [f"memory-node-{n}" for n in range(4)]
    # After the CPU devices, so every CPU device keeps its place in the slices.
    assert [d.kind for d in model.devices] == ["numanode"] * 4 + ["memory"] * 4
    capacities = [dict(d.capacity) for d in memory]
    assert capacities == [
        # 16 GiB less 1 GiB of 2 MiB pages and 2 GiB of 1 GiB pages.
        {"dra.cpu/memory": "13Gi", "dra.cpu/hugepages2Mi": "1Gi", "dra.cpu/hugepages1Gi": "2Gi"},
        {"dra.cpu/memory": "7680Mi", "dra.cpu/hugepages2Mi": "512Mi"},
        # An empty pool is a pool the node has: its capacity is 0, not left out.
        {"dra.cpu/memory": "12284Mi", "dra.cpu/hugepages2Mi": "0", "dra.cpu/hugepages1Gi": "4Gi"},
        {"dra.cpu/memory": "10Gi", "dra.cpu/hugepages2Mi": "2Gi"},
    ]
    for node, device in enumerate(memory):
        assert dict(device.attributes) == {NUMA: node}
        assert device.allow_multiple_allocations
        assert device.cpus == CPUSet()
        assert not device.node_allocatable


@pytest.mark.parametrize("mode", list(MODES))
def test_the_cpu_devices_are_those_published_without_memory(machines: Machines, mode: str) -> None:
    machine = machines("numa4-hugepages")
    without = build_devices(machine, DeviceOptions(**MODES[mode]))
    with_memory = build_devices(machine, DeviceOptions(**MODES[mode], publish_memory=True))
    cpu_devices = [d for d in with_memory.devices if d.kind != "memory"]
    assert cpu_devices == list(without.devices)
    assert with_memory.order == without.order
    assert len(with_memory.devices) == len(without.devices) + 4
    assert with_memory.fingerprint != without.fingerprint


@pytest.mark.parametrize("mode", list(MODES))
def test_without_the_option_no_memory_device_is_built(machines: Machines, mode: str) -> None:
    model = build_devices(machines("numa4-hugepages"), DeviceOptions(**MODES[mode]))
    assert all(d.kind != "memory" and "dra.cpu/memory" not in d.capacity for d in model.devices)
    assert not any(d.name.startswith("memory-") for d in model.devices)


def with_memory(machine: Machine, *memory: NodeMemory) -> Machine:
    return replace(machine, memory=tuple(memory))


def test_nodes_without_memory_or_with_unreadable_memory_have_no_device(
    machines: Machines,
) -> None:
    machine = with_memory(
        machines("numa4-hugepages"),
        NodeMemory(0, 4 << 20),
        # Memoryless (CPUs only): MemTotal 0.
        NodeMemory(1, 0),
        # MemTotal unreadable: no device, whatever its pools; the inventory says why.
        NodeMemory(2, None, (HugepagePool(2048, 8, 8),), ("meminfo: missing",)),
        # Memory without CPUs (a CPU-less node): a device all the same.
        NodeMemory(9, 1 << 20, (HugepagePool(2048, 4, 4),)),
    )
    model = build_devices(machine, DeviceOptions(publish_memory=True))
    memory = {d.name: dict(d.capacity) for d in model.devices if d.kind == "memory"}
    assert memory == {
        "memory-node-0": {"dra.cpu/memory": "4Gi"},
        "memory-node-9": {"dra.cpu/memory": "1016Mi", "dra.cpu/hugepages2Mi": "8Mi"},
    }


def test_page_sizes_other_than_2mi_and_1gi_are_named_the_same_way(machines: Machines) -> None:
    machine = with_memory(
        machines("numa4-hugepages"),
        NodeMemory(0, 64 << 20, (HugepagePool(64, 32, 32), HugepagePool(32 << 10, 2, 2))),
    )
    (device,) = [
        d for d in build_devices(machine, DeviceOptions(publish_memory=True)).devices
        if d.kind == "memory"
    ]  # fmt: skip
    assert dict(device.capacity) == {
        "dra.cpu/memory": f"{64 * 1024 - 2 - 64}Mi",
        "dra.cpu/hugepages64Ki": "2Mi",
        "dra.cpu/hugepages32Mi": "64Mi",
    }


def test_a_memory_device_is_healthy_and_said_so_in_its_own_words(machines: Machines) -> None:
    model = build_devices(machines("numa4-hugepages"), DeviceOptions(publish_memory=True))
    book = assess(HealthBook(), model, machines("numa4-hugepages").online, "", 1.0)
    assert book.entries["memory-node-2"].status == "Healthy"
    assert book.entries["memory-node-2"].message == "NUMA node memory read"
    assert book.entries["cpudevnuma002"].message == "CPUs online"


def state(machine: Machine) -> NodeState:
    return NodeState(
        machine=machine,
        devices=build_devices(machine, DeviceOptions(publish_memory=True, min_shared=1)),
    )


def result(device: str, consumed: dict[str, str], request: str) -> ResultInput:
    return ResultInput(request=request, device=device, pool="node", consumed=consumed)


@pytest.mark.parametrize(
    "results",
    [
        (result("memory-node-1", {"dra.cpu/hugepages2Mi": "32Mi"}, "mem"),),
        (
            result("cpudevnuma001", {"dra.cpu/cpu": "4"}, "cpus"),
            result("memory-node-1", {"dra.cpu/memory": "1Gi"}, "mem"),
        ),
    ],
    ids=["memory-alone", "cpus-and-memory"],
)
def test_a_prepare_naming_a_memory_device_is_refused_in_one_line(
    machines: Machines, results: tuple[ResultInput, ...]
) -> None:
    before = state(machines("numa4-hugepages"))
    request = PrepareInput(uid="c1", namespace="ns", name="pinned", results=results)
    with pytest.raises(InvalidInputError) as refused:
        claims.prepare(before, request, 1)
    assert str(refused.value) == (
        "claim c1 request 'mem' device 'memory-node-1': memory devices are published but not "
        "yet allocatable; request CPUs only"
    )
    # Nothing was taken: the same CPU claim alone still gets its CPUs.
    cpus_only = PrepareInput(
        uid="c1",
        namespace="ns",
        name="pinned",
        results=(result("cpudevnuma001", {"dra.cpu/cpu": "4"}, "cpus"),),
    )
    outcome = claims.prepare(before, cpus_only, 1)
    assert len(outcome.record.cpus) == 4


async def test_a_resized_hugepage_pool_reaches_the_devices_at_the_next_refresh(
    tmp_path: Path, machines: Machines
) -> None:
    machine = machines("numa4-hugepages")
    node = NodeAllocator(
        state_dir=tmp_path / "state",
        cdi_dir=tmp_path / "cdi",
        options=DeviceOptions(publish_memory=True, min_shared=1),
    )
    await node.start(machine)
    _, generation = node.devices
    # Free pages come and go: nothing the devices are built from changed.
    pools = (HugepagePool(2048, 512, 10), HugepagePool(1 << 20, 2, 0))
    busier = replace(
        machine, memory=(replace(machine.memory[0], hugepages=pools), *machine.memory[1:])
    )
    assert busier.fingerprint == machine.fingerprint
    assert memory_fingerprint(busier.memory) == memory_fingerprint(machine.memory)
    assert await node.update_topology(busier) is False
    # The 2 MiB pool of node 3 grown to 2048 pages: same CPUs, new capacity.
    bigger = replace(machine.memory[3], hugepages=(HugepagePool(2048, 2048, 2048),))
    grown = replace(machine, memory=(*machine.memory[:3], bigger))
    assert grown.fingerprint == machine.fingerprint
    assert await node.update_topology(grown) is True
    model, after = node.devices
    assert after > generation
    assert dict(model.by_name["memory-node-3"].capacity) == {
        "dra.cpu/memory": "8Gi",
        "dra.cpu/hugepages2Mi": "4Gi",
    }
