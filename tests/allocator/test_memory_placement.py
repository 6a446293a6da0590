"""Memory placement: a claim's memory nodes are the NUMA nodes of its CPUs when the claim (or
the driver's default) asks for `local`, none otherwise; a container's are the union over its
claims; the record keeps them across restarts, and records of older builds read as not placed.

Machines: single-4c8t (1 NUMA node), xeon-2s-ht (2: node 0 = CPUs 0-9,20-29, node 1 =
10-19,30-39), epyc-2s-nps4 (8 NUMA nodes, 4 per socket).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dracpu.allocator import claims
from dracpu.allocator.claims import (
    ClaimRecord,
    Container,
    NodeState,
    Owner,
    PrepareInput,
    ResultInput,
)
from dracpu.allocator.domain.devices import DeviceOptions, build_devices
from dracpu.allocator.domain.opaque import OpaqueConfig
from dracpu.allocator.live.node import NodeAllocator
from dracpu.allocator.rpc import wire
from dracpu.allocator.store import records
from dracpu.core.cpuset import CPUSet
from dracpu.core.errors import InvalidInputError
from dracpu.core.machine import Machine
from dracpu.core.metrics import exposition, service_registry

Machines = Callable[[str], Machine]
OWNER = Owner("pod-1", "app", "ns", "p")


def state_for(machine: Machine, **options: Any) -> NodeState:
    return NodeState(machine=machine, devices=build_devices(machine, DeviceOptions(**options)))


def result(device: str, count: int | None, request: str = "req") -> ResultInput:
    consumed = {} if count is None else {"dra.cpu/cpu": str(count)}
    return ResultInput(request=request, device=device, pool="node", consumed=consumed)


def config(
    requests: tuple[str, ...] = (), source: str = "FromClaim", **fields: Any
) -> OpaqueConfig:
    parameters = json.dumps({"apiVersion": "v1alpha1", "cpuConfig": fields}).encode()
    return OpaqueConfig(source=source, requests=requests, driver="dra.cpu", parameters=parameters)


def claim(uid: str, *results: ResultInput, configs: tuple[OpaqueConfig, ...] = ()) -> PrepareInput:
    return PrepareInput(uid=uid, namespace="ns", name=uid, results=results, configs=configs)


def prepared(state: NodeState, request: PrepareInput) -> tuple[NodeState, ClaimRecord]:
    outcome = claims.prepare(state, request, 1)
    return outcome.state, outcome.record


# ---- which nodes a claim gets -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("fixture", "device", "count", "options", "expected"),
    [
        ("single-4c8t", "cpudevnuma000", 2, {}, "0"),
        ("xeon-2s-ht", "cpudevnuma000", 4, {}, "0"),
        ("xeon-2s-ht", "cpudevnuma001", 4, {}, "1"),
        ("epyc-2s-nps4", "cpudevnuma006", 8, {}, "6"),
        # One socket of four NUMA nodes: a packed claim that fits one node stays on it.
        ("epyc-2s-nps4", "cpudevsocket001", 4, {"group_by": "socket"}, "4"),
    ],
)
def test_a_local_claim_gets_the_numa_nodes_of_its_cpus(
    machines: Machines,
    fixture: str,
    device: str,
    count: int,
    options: dict[str, Any],
    expected: str,
) -> None:
    machine = machines(fixture)
    state = state_for(machine, **options)
    _, record = prepared(
        state, claim("c", result(device, count), configs=(config(memoryPlacement="local"),))
    )
    assert record.memory_nodes == CPUSet.parse(expected)
    assert record.memory_nodes == machine.numa_nodes_of(record.cpus)


def test_a_spread_claim_gets_every_node_it_spans(machines: Machines) -> None:
    """100 CPUs of a socket of four 32-CPU nodes: spread over all four (25 each)."""
    state = state_for(machines("epyc-2s-nps4"), group_by="socket")
    spread = config(memoryPlacement="local", distributeAcrossNUMA=True)
    _, record = prepared(state, claim("c", result("cpudevsocket001", 100), configs=(spread,)))
    assert record.memory_nodes == CPUSet.parse("4-7")
    # Across both sockets, two results of one claim: every node of both.
    state = state_for(machines("epyc-2s-nps4"), group_by="socket")
    both = claim(
        "d",
        result("cpudevsocket000", 100, "a"),
        result("cpudevsocket001", 100, "b"),
        configs=(spread,),
    )
    _, record = prepared(state, both)
    assert record.memory_nodes == CPUSet.parse("0-7")


def test_a_two_numa_spread_claim_gets_both_nodes(machines: Machines) -> None:
    """xeon-2s-ht in socket grouping has one node per socket; two results, one per socket."""
    state = state_for(machines("xeon-2s-ht"), group_by="socket")
    request = claim(
        "c",
        result("cpudevsocket000", 2, "a"),
        result("cpudevsocket001", 2, "b"),
        configs=(config(memoryPlacement="local"),),
    )
    _, record = prepared(state, request)
    assert record.memory_nodes == CPUSet.parse("0-1")


@pytest.mark.parametrize(
    ("default", "configs", "placed"),
    [
        ("none", (), False),  # the driver's default: not placed
        ("local", (), True),
        ("none", (config(memoryPlacement="local"),), True),
        ("local", (config(memoryPlacement="none"),), False),  # the claim wins
        # The claim's config over the class's, whichever sets the field.
        (
            "none",
            (config(memoryPlacement="none"), config(source="FromClass", memoryPlacement="local")),
            False,
        ),
        (
            "none",
            (config(strategy="spread"), config(source="FromClass", memoryPlacement="local")),
            True,
        ),
        # Next to placement fields.
        (
            "none",
            (config(strategy="spread", alignUncoreCache=False, memoryPlacement="local"),),
            True,
        ),
    ],
)
def test_the_claim_chooses_else_the_driver_default(
    machines: Machines, default: str, configs: tuple[OpaqueConfig, ...], placed: bool
) -> None:
    state = state_for(machines("xeon-2s-ht"), memory_placement=default)
    _, record = prepared(state, claim("c", result("cpudevnuma001", 2), configs=configs))
    assert record.memory_nodes == (CPUSet.parse("1") if placed else CPUSet())


def test_one_local_request_places_the_whole_claim(machines: Machines) -> None:
    """The container runs on every CPU of the claim: each keeps its own node's memory."""
    state = state_for(machines("xeon-2s-ht"))
    request = claim(
        "c",
        result("cpudevnuma000", 2, "a"),
        result("cpudevnuma001", 2, "b"),
        configs=(config(requests=("a",), memoryPlacement="local"),),
    )
    _, record = prepared(state, request)
    assert record.memory_nodes == CPUSet.parse("0-1")


def test_individual_and_external_modes_take_the_memory_placement(machines: Machines) -> None:
    machine = machines("xeon-2s-ht")
    state = state_for(machine, mode="individual")
    _, record = prepared(
        state, claim("c", result("cpudev005", None), configs=(config(memoryPlacement="local"),))
    )
    assert record.memory_nodes == machine.numa_nodes_of(record.cpus)
    state = state_for(machine, allocator="external")
    with_cpuset = claim(
        "c",
        result("cpudevnuma001", 2),
        configs=(
            config(cpuset="12-13"),
            config(source="FromClass", memoryPlacement="local"),
        ),
    )
    _, record = prepared(state, with_cpuset)
    assert record.cpus == CPUSet.parse("12-13") and record.memory_nodes == CPUSet.parse("1")


@pytest.mark.parametrize(
    ("options", "configs", "message"),
    [
        (
            {},
            (config(memoryPlacement="strict"),),
            "opaque config: cpuConfig.memoryPlacement: 'strict' is not one of local, none",
        ),
        ({}, (config(memoryPlacement=True),), "cpuConfig.memoryPlacement: true is not one of"),
        ({}, (config(memoryPlacment="local"),), "unknown field 'cpuConfig.memoryPlacment'"),
        (
            {"allocator": "external"},
            (config(cpuset="12-13", memoryPlacement="Local"),),
            "cpuConfig.memoryPlacement: 'Local' is not one of local, none",
        ),
    ],
)
def test_bad_values_fail_the_prepare(
    machines: Machines, options: dict[str, Any], configs: tuple[OpaqueConfig, ...], message: str
) -> None:
    state = state_for(machines("xeon-2s-ht"), **options)
    with pytest.raises(InvalidInputError) as caught:
        claims.prepare(state, claim("c", result("cpudevnuma001", 2), configs=configs), 1)
    assert message in str(caught.value)


def test_individual_mode_still_refuses_placement_fields(machines: Machines) -> None:
    state = state_for(machines("xeon-2s-ht"), mode="individual")
    request = claim(
        "c",
        result("cpudev005", None),
        configs=(config(memoryPlacement="local", strategy="spread"),),
    )
    with pytest.raises(
        InvalidInputError, match=r"take no configuration but cpuConfig\.memoryPlacement"
    ):
        claims.prepare(state, request, 1)


def test_prepare_again_keeps_the_recorded_placement(machines: Machines) -> None:
    """The placement is decided once: a later prepare (or a changed default) leaves it."""
    state = state_for(machines("xeon-2s-ht"))
    state, record = prepared(state, claim("c", result("cpudevnuma001", 2)))
    assert not record.memory_nodes
    again = claims.prepare(
        state, claim("c", result("cpudevnuma001", 2), configs=(config(memoryPlacement="local"),)), 2
    )
    assert again.already_prepared and again.record.memory_nodes == CPUSet()


# ---- a container's memory nodes ---------------------------------------------------------------


def test_a_container_gets_the_union_of_its_claims(machines: Machines) -> None:
    state = state_for(machines("xeon-2s-ht"))
    local = (config(memoryPlacement="local"),)
    state, a = prepared(state, claim("a", result("cpudevnuma000", 2), configs=local))
    state, b = prepared(state, claim("b", result("cpudevnuma001", 2), configs=local))
    outcome = claims.attach(state, Container("cid", OWNER), {"a": a.cpus, "b": b.cpus})
    assert outcome.memory_nodes == CPUSet.parse("0-1")
    alone = claims.attach(state, Container("cid", OWNER), {"a": a.cpus})
    assert alone.memory_nodes == CPUSet.parse("0")


def test_a_placed_claim_next_to_an_unplaced_one_covers_both(machines: Machines) -> None:
    state = state_for(machines("xeon-2s-ht"))
    state, a = prepared(
        state, claim("a", result("cpudevnuma000", 2), configs=(config(memoryPlacement="local"),))
    )
    state, b = prepared(state, claim("b", result("cpudevnuma001", 2)))
    outcome = claims.attach(state, Container("cid", OWNER), {"a": a.cpus, "b": b.cpus})
    assert outcome.memory_nodes == CPUSet.parse("0-1")


def test_unplaced_claims_leave_the_container_every_node(machines: Machines) -> None:
    state = state_for(machines("xeon-2s-ht"))
    state, a = prepared(state, claim("a", result("cpudevnuma001", 2)))
    outcome = claims.attach(state, Container("cid", OWNER), {"a": a.cpus})
    assert outcome.memory_nodes == CPUSet()
    response = wire.allocator_pb2.AttachContainerResponse(
        memory_nodes=outcome.memory_nodes.format()
    )
    assert response.memory_nodes == ""


def test_adopt_reports_the_accepted_claims_nodes(machines: Machines) -> None:
    state = state_for(machines("xeon-2s-ht"))
    state, a = prepared(
        state, claim("a", result("cpudevnuma001", 2), configs=(config(memoryPlacement="local"),))
    )
    outcome = claims.adopt(
        state, Container("cid", OWNER), {"a": a.cpus, "gone": CPUSet.parse("2")}, 5
    )
    assert outcome.memory_nodes == CPUSet.parse("1")


def test_a_recovered_claim_is_placed_when_the_kubelet_prepares_it_again(
    machines: Machines,
) -> None:
    state = state_for(machines("xeon-2s-ht"))
    outcome = claims.adopt(state, Container("cid", OWNER), {"q": CPUSet.parse("12-13")}, 5)
    request = claim("q", result("cpudevnuma001", 2), configs=(config(memoryPlacement="local"),))
    confirmed = claims.prepare(outcome.state, request, 6)
    assert confirmed.confirmed and confirmed.record.memory_nodes == CPUSet.parse("1")


def test_the_claim_message_carries_the_nodes(machines: Machines) -> None:
    state = state_for(machines("xeon-2s-ht"), memory_placement="local")
    _, record = prepared(state, claim("c", result("cpudevnuma001", 2)))
    assert wire.claim_to_proto(record).memory_nodes == "1"
    _, unplaced = prepared(
        state_for(machines("xeon-2s-ht")), claim("c", result("cpudevnuma001", 2))
    )
    assert wire.claim_to_proto(unplaced).memory_nodes == ""


# ---- the saved record ---------------------------------------------------------------------------


def test_the_record_keeps_the_nodes_and_unplaced_records_look_as_before(
    machines: Machines,
) -> None:
    state = state_for(machines("epyc-2s-nps4"), group_by="socket", memory_placement="local")
    spread = config(distributeAcrossNUMA=True)
    _, record = prepared(state, claim("c", result("cpudevsocket000", 100), configs=(spread,)))
    body = records.record_to_json(record)
    assert body["memoryNodes"] == "0-3"
    assert records.decode_record(records.encode_record(record), "t", "c") == record
    _, unplaced = prepared(
        state_for(machines("xeon-2s-ht")), claim("u", result("cpudevnuma000", 2))
    )
    # No key at all: the file is what an older build writes and reads.
    assert "memoryNodes" not in records.record_to_json(unplaced)


def test_an_older_record_reads_as_not_placed(machines: Machines) -> None:
    _, record = prepared(
        state_for(machines("xeon-2s-ht"), memory_placement="local"),
        claim("c", result("cpudevnuma001", 2)),
    )
    body = records.record_to_json(record)
    del body["memoryNodes"]
    document = {"formatVersion": 1, "checksum": records.digest(body), "body": body}
    old = records.decode_record(json.dumps(document).encode(), "old", "c")
    assert old.memory_nodes == CPUSet() and old.cpus == record.cpus


def test_a_garbled_node_list_is_a_corrupt_record(machines: Machines) -> None:
    _, record = prepared(
        state_for(machines("xeon-2s-ht"), memory_placement="local"),
        claim("c", result("cpudevnuma001", 2)),
    )
    for garbled in (1, "x-y"):
        body = records.record_to_json(record) | {"memoryNodes": garbled}
        document = {"formatVersion": 1, "checksum": records.digest(body), "body": body}
        with pytest.raises(records.CorruptRecordError, match="malformed content"):
            records.decode_record(json.dumps(document).encode(), "bad", "c")


async def test_the_nodes_survive_an_allocator_restart(tmp_path: Path, machines: Machines) -> None:
    machine = machines("xeon-2s-ht")
    options = DeviceOptions(reserved=CPUSet.parse("0,20"), memory_placement="local")
    registry = service_registry()

    def node(options: DeviceOptions = options, **kw: Any) -> NodeAllocator:
        return NodeAllocator(
            state_dir=tmp_path / "state", cdi_dir=tmp_path / "cdi", options=options, **kw
        )

    first = node(registry=registry)
    await first.start(machine)
    placed = await first.prepare(claim("p", result("cpudevnuma001", 2)))
    plain = await first.prepare(
        claim("n", result("cpudevnuma000", 2), configs=(config(memoryPlacement="none"),))
    )
    assert "dra_cpu_resource_claims_memory_placed 1.0" in exposition(registry)
    # Restarted with the driver's default changed: each claim keeps what it was prepared with.
    again = node(DeviceOptions(reserved=CPUSet.parse("0,20")))
    await again.start(machine)
    assert again.state.records["p"].memory_nodes == CPUSet.parse("1")
    assert again.state.records["n"].memory_nodes == CPUSet()
    attached = await again.attach(Container("cid", OWNER), {"p": placed.record.cpus})
    assert attached.memory_nodes == CPUSet.parse("1")
    assert plain.record.memory_nodes == CPUSet()
