"""Memory devices (publishMemoryDevices): one per NUMA node with memory, after the CPU devices,
with the node's memory and hugepage pools as consumable capacity; the CPU devices are those
published without them; a claim's memory is accounted per node and kind at prepare, refused past
what is free, kept in its record, and attached only to an nri-plugin that enforces it.

Machine: numa4-hugepages (4 NUMA nodes of 4 two-thread cores; node memory and pools:
0: 16 GiB, 512 x 2 MiB and 2 x 1 GiB; 1: 8 GiB, 256 x 2 MiB; 2: 16 GiB less 4 MiB, an empty
2 MiB pool and 4 x 1 GiB; 3: 12 GiB, 1024 x 2 MiB).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from harness.requests import prepare_request

from dracpu.allocator import claims
from dracpu.allocator.claims import NodeState, PrepareInput, ResultInput
from dracpu.allocator.claims.model import MemoryAmount
from dracpu.allocator.domain.device_health import HealthBook, assess
from dracpu.allocator.domain.devices import DeviceOptions, build_devices
from dracpu.allocator.live.node import NodeAllocator
from dracpu.allocator.rpc import wire
from dracpu.allocator.servicer import AllocatorServicer
from dracpu.allocator.store import records
from dracpu.core.containers import Container, Owner
from dracpu.core.cpuset import CPUSet
from dracpu.core.errors import ConflictError, DracpuError, InsufficientMemoryError
from dracpu.core.machine import Machine
from dracpu.core.memory import HugepagePool, NodeMemory, memory_fingerprint
from dracpu.core.metrics import exposition, service_registry
from dracpu.pb.allocator.v1 import allocator_pb2

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


def claim(uid: str, *results: ResultInput) -> PrepareInput:
    return PrepareInput(uid=uid, namespace="ns", name=uid, results=results)


CPUS1 = result("cpudevnuma001", {"dra.cpu/cpu": "2"}, "cpus")


def test_memory_is_claimed_beside_cpus_and_recorded_per_node_and_kind(
    machines: Machines,
) -> None:
    outcome = claims.prepare(
        state(machines("numa4-hugepages")),
        claim(
            "c1",
            CPUS1,
            result("memory-node-1", {"dra.cpu/memory": "1Gi", "dra.cpu/hugepages2Mi": "32Mi"}, "m"),
            # A second result on the same device adds to the first.
            result("memory-node-1", {"dra.cpu/hugepages2Mi": "16Mi"}, "more"),
            result("memory-node-0", {"dra.cpu/hugepages1Gi": "1Gi"}, "big"),
        ),
        1,
    )
    record = outcome.record
    assert record.memory == (
        MemoryAmount(0, "hugepages-1Gi", GIB),
        MemoryAmount(1, "hugepages-2Mi", 48 * MIB),
        MemoryAmount(1, "memory", GIB),
    )
    # The CPU results alone make the allocations; the memory nodes are where its memory is.
    assert [a.device for a in record.allocations] == ["cpudevnuma001"]
    assert len(record.cpus) == 2
    assert record.memory_nodes == CPUSet.parse("0-1")


REFUSALS = [
    # Node 1's 2 MiB pool is 512 MiB; another claim holds 496 MiB of it.
    (
        result("memory-node-1", {"dra.cpu/hugepages2Mi": "32Mi"}, "m"),
        "claim c2: NUMA node 1 hugepages-2Mi: wants 32Mi, 16Mi free",
    ),
    # Node 1's memory outside its pool is 7680 MiB; the other claim holds 7 GiB.
    (
        result("memory-node-1", {"dra.cpu/memory": "1Gi"}, "m"),
        "claim c2: NUMA node 1 memory: wants 1Gi, 512Mi free",
    ),
    # Node 1 has no 1 GiB pool at all.
    (
        result("memory-node-1", {"dra.cpu/hugepages1Gi": "1Gi"}, "m"),
        "claim c2: NUMA node 1 hugepages-1Gi: wants 1Gi, 0 free",
    ),
    # Node 2's 2 MiB pool is empty.
    (
        result("memory-node-2", {"dra.cpu/hugepages2Mi": "2Mi"}, "m"),
        "claim c2: NUMA node 2 hugepages-2Mi: wants 2Mi, 0 free",
    ),
]


@pytest.mark.parametrize(
    ("memory", "error"), REFUSALS, ids=["hugepages", "memory", "no-pool", "empty-pool"]
)
def test_memory_past_what_the_node_has_free_is_refused_in_one_line(
    machines: Machines, memory: ResultInput, error: str
) -> None:
    held = claims.prepare(
        state(machines("numa4-hugepages")),
        claim(
            "c1",
            CPUS1,
            result(
                "memory-node-1", {"dra.cpu/hugepages2Mi": "496Mi", "dra.cpu/memory": "7Gi"}, "m"
            ),
        ),
        1,
    ).state
    with pytest.raises(InsufficientMemoryError) as refused:
        claims.prepare(held, claim("c2", CPUS1, memory), 2)
    assert str(refused.value) == error
    # Nothing was taken: the same claim without its memory gets its CPUs, holding no memory.
    outcome = claims.prepare(held, claim("c2", CPUS1), 2)
    assert len(outcome.record.cpus) == 2
    assert outcome.record.memory == ()
    assert outcome.record.memory_nodes == CPUSet()


def test_unprepare_gives_the_memory_back(machines: Machines) -> None:
    pool = result("memory-node-3", {"dra.cpu/hugepages2Mi": "2Gi"}, "m")
    cpus = result("cpudevnuma003", {"dra.cpu/cpu": "1"}, "cpus")
    held = claims.prepare(state(machines("numa4-hugepages")), claim("c1", cpus, pool), 1).state
    with pytest.raises(InsufficientMemoryError, match="wants 2Gi, 0 free"):
        claims.prepare(held, claim("c2", cpus, pool), 2)
    emptied, _ = claims.unprepare(held, "c1")
    assert claims.prepare(emptied, claim("c2", cpus, pool), 2).record.memory == (
        MemoryAmount(3, "hugepages-2Mi", 2 * GIB),
    )


def test_a_memory_result_without_consumed_capacity_takes_nothing(machines: Machines) -> None:
    record = claims.prepare(
        state(machines("numa4-hugepages")),
        claim("c1", CPUS1, result("memory-node-1", {}, "m")),
        1,
    ).record
    assert record.memory == ()
    assert record.memory_nodes == CPUSet()


@pytest.mark.parametrize(
    ("results", "error"),
    [
        (
            (result("memory-node-1", {"dra.cpu/hugepages2Mi": "32Mi"}, "m"),),
            "claim c1: memory devices are claimed together with CPUs; add a request for CPUs "
            "to the claim",
        ),
        (
            (CPUS1, result("memory-node-1", {"dra.cpu/cpu": "1"}, "m")),
            "claim c1 request 'm' device 'memory-node-1' capacity dra.cpu/cpu: not a capacity "
            "of a memory device",
        ),
        (
            (CPUS1, result("memory-node-1", {"dra.cpu/memory": "1.5"}, "m")),
            "claim c1 request 'm' device 'memory-node-1' capacity dra.cpu/memory: must be a "
            "whole number of bytes, got 1.5",
        ),
        (
            (CPUS1, result("memory-node-7", {"dra.cpu/memory": "1Gi"}, "m")),
            "claim c1 request 'm' device 'memory-node-7': no such device on this node",
        ),
    ],
    ids=["memory-alone", "cpu-capacity", "fraction", "no-such-node"],
)
def test_a_malformed_memory_result_is_refused_in_one_line(
    machines: Machines, results: tuple[ResultInput, ...], error: str
) -> None:
    with pytest.raises(DracpuError) as refused:
        claims.prepare(state(machines("numa4-hugepages")), claim("c1", *results), 1)
    assert str(refused.value) == error


def test_the_same_claim_again_must_ask_the_same_memory(machines: Machines) -> None:
    memory = result("memory-node-1", {"dra.cpu/memory": "1Gi"}, "m")
    held = claims.prepare(state(machines("numa4-hugepages")), claim("c1", CPUS1, memory), 1)
    again = claims.prepare(held.state, claim("c1", CPUS1, memory), 2)
    assert again.already_prepared and again.record == held.record
    more = result("memory-node-1", {"dra.cpu/memory": "2Gi"}, "m")
    with pytest.raises(ConflictError, match="already prepared with different allocation"):
        claims.prepare(held.state, claim("c1", CPUS1, more), 2)


def test_a_record_keeps_its_memory_and_an_older_record_reads_as_none(
    machines: Machines,
) -> None:
    memory = result("memory-node-0", {"dra.cpu/hugepages2Mi": "4Mi", "dra.cpu/memory": "1Gi"}, "m")
    record = claims.prepare(
        state(machines("numa4-hugepages")), claim("c1", CPUS1, memory), 1
    ).record
    body = records.record_to_json(record)
    assert body["memory"] == [
        {"numaNode": 0, "kind": "hugepages-2Mi", "bytes": 4 * MIB},
        {"numaNode": 0, "kind": "memory", "bytes": GIB},
    ]
    assert records.record_from_json(body) == record
    older = {k: v for k, v in body.items() if k not in ("memory", "memoryNodes")}
    assert records.record_from_json(older).memory == ()
    for garbled in (
        "1Gi",
        [{"numaNode": 0, "kind": "memory"}],
        [{"numaNode": -1, "kind": "memory", "bytes": 1}],
    ):
        bad = body | {"memory": garbled}
        document = {"formatVersion": 1, "checksum": records.digest(bad), "body": bad}
        with pytest.raises(records.CorruptRecordError, match="malformed content"):
            records.decode_record(json.dumps(document).encode(), "bad", "c1")


async def test_the_memory_held_survives_an_allocator_restart(
    tmp_path: Path, machines: Machines
) -> None:
    machine = machines("numa4-hugepages")

    def node() -> NodeAllocator:
        return NodeAllocator(
            state_dir=tmp_path / "state",
            cdi_dir=tmp_path / "cdi",
            options=DeviceOptions(publish_memory=True, min_shared=1),
        )

    pool = result("memory-node-3", {"dra.cpu/hugepages2Mi": "1536Mi"}, "m")
    first = node()
    await first.start(machine)
    await first.prepare(claim("c1", result("cpudevnuma003", {"dra.cpu/cpu": "1"}, "cpus"), pool))
    again = node()
    await again.start(machine)
    assert again.state.records["c1"].memory == (MemoryAmount(3, "hugepages-2Mi", 1536 * MIB),)
    # What it holds is still held: 512 MiB of node 3's 2 GiB pool are left.
    with pytest.raises(InsufficientMemoryError, match="wants 1536Mi, 512Mi free"):
        await again.prepare(claim("c2", CPUS1, pool))
    await again.unprepare("c1")
    assert (await again.prepare(claim("c2", CPUS1, pool))).record.memory


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


async def test_a_memory_claim_attaches_only_to_a_plugin_that_enforces_it(
    tmp_path: Path, machines: Machines
) -> None:
    node = NodeAllocator(
        state_dir=tmp_path / "state",
        cdi_dir=tmp_path / "cdi",
        options=DeviceOptions(publish_memory=True, min_shared=1),
    )
    await node.start(machines("numa4-hugepages"))
    servicer = AllocatorServicer(node)
    memory = {
        "dra.cpu/memory": "1Gi",
        "dra.cpu/hugepages2Mi": "64Mi",
        "dra.cpu/hugepages1Gi": "1Gi",
    }
    request = prepare_request("c1", 2, device="cpudevnuma000", pods=["pod-1"], memory=memory)
    cpus = CPUSet.parse((await servicer.Prepare(request, None)).claim.cpus)
    container = Container("cid", Owner("pod-1", "app", "default", "p"))
    # An older nri-plugin does not say it enforces memory: the container is refused, unbound.
    with pytest.raises(ConflictError) as refused:
        await node.attach(container, {"c1": cpus})
    assert str(refused.value) == (
        "claim c1 holds NUMA node memory, which this nri-plugin does not enforce; upgrade the "
        "nri-plugin"
    )
    assert node.state.records["c1"].owner is None
    attach = allocator_pb2.AttachContainerRequest(
        container=allocator_pb2.ContainerRef(
            container_id="cid",
            pod_uid="pod-1",
            container_name="app",
            pod_namespace="default",
            pod_name="p",
        ),
        claims={"c1": cpus.format()},
        enforces_memory=True,
    )
    reply = await servicer.AttachContainer(attach, None)
    assert reply.memory_nodes == "0"
    assert dict(reply.hugepage_limits) == {"2Mi": 64 * MIB, "1Gi": GIB}
    assert node.state.records["c1"].container_id == "cid"


async def test_the_memory_held_and_free_is_shown_per_node_and_kind(
    tmp_path: Path, machines: Machines
) -> None:
    registry = service_registry()
    node = NodeAllocator(
        state_dir=tmp_path / "state",
        cdi_dir=tmp_path / "cdi",
        options=DeviceOptions(publish_memory=True, min_shared=1),
        registry=registry,
    )
    await node.start(machines("numa4-hugepages"))
    memory = result("memory-node-1", {"dra.cpu/memory": "1Gi", "dra.cpu/hugepages2Mi": "32Mi"}, "m")
    outcome = await node.prepare(claim("c1", CPUS1, memory))
    shown = wire.claim_to_proto(outcome.record)
    assert [(m.numa_node, m.kind, m.bytes) for m in shown.memory] == [
        (1, "hugepages-2Mi", 32 * MIB),
        (1, "memory", GIB),
    ]
    text = exposition(registry)
    for line in (
        'dra_cpu_memory_claimed_bytes{kind="hugepages-2Mi",numa_node="1"} 3.3554432e+07',
        'dra_cpu_memory_free_bytes{kind="hugepages-2Mi",numa_node="1"} 5.0331648e+08',
        'dra_cpu_memory_claimed_bytes{kind="memory",numa_node="1"} 1.073741824e+09',
        'dra_cpu_memory_free_bytes{kind="hugepages-1Gi",numa_node="0"} 2.147483648e+09',
        'dra_cpu_memory_claimed_bytes{kind="hugepages-1Gi",numa_node="0"} 0.0',
    ):
        assert line in text
    await node.unprepare("c1")
    assert 'dra_cpu_memory_claimed_bytes{kind="memory",numa_node="1"} 0.0' in exposition(registry)


def test_the_device_metadata_of_a_claim_holding_memory_gives_its_bytes_per_kind(
    machines: Machines,
) -> None:
    """Every CPU device of the claim carries, for its containers' metadata file, the memory
    nodes and the bytes of each kind it holds, summed over those nodes."""
    outcome = claims.prepare(
        state(machines("numa4-hugepages")),
        claim(
            "c1",
            CPUS1,
            result("memory-node-1", {"dra.cpu/memory": "1Gi", "dra.cpu/hugepages2Mi": "32Mi"}, "m"),
            result("memory-node-0", {"dra.cpu/hugepages2Mi": "16Mi"}, "more"),
        ),
        1,
    )
    (device,) = wire.prepare_response(outcome).devices
    attributes = {name: value.WhichOneof("value") for name, value in device.attributes.items()}
    shown = {name: getattr(value, attributes[name]) for name, value in device.attributes.items()}
    assert shown["dra.cpu/memoryNodes"] == "0-1"
    assert shown["dra.cpu/memoryBytes"] == GIB
    assert shown["dra.cpu/hugepages2MiBytes"] == 48 * MIB  # 32Mi on node 1, 16Mi on node 0
    assert attributes["dra.cpu/hugepages2MiBytes"] == "int"
    assert "dra.cpu/hugepages1GiBytes" not in shown  # none held: not said


def test_a_claim_of_cpus_alone_has_no_memory_attributes(machines: Machines) -> None:
    outcome = claims.prepare(state(machines("numa4-hugepages")), claim("c1", CPUS1), 1)
    (device,) = wire.prepare_response(outcome).devices
    assert not [name for name in device.attributes if name.endswith("Bytes")]
