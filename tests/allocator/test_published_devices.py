"""What the node publishes never offers a CPU it cannot give: the shared-pool floor is left out,
and so are the CPUs of claims prepared for other devices (another device mode, grouping or
reserved set), until those claims are released.

Machine: single-4c8t (one NUMA node, CPUs 0-7, siblings n / n+4) unless a row says otherwise.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from dracpu.allocator import claims
from dracpu.allocator.claims import NodeState, PrepareInput, ResultInput
from dracpu.allocator.domain.devices import DeviceModel, DeviceOptions, build_devices
from dracpu.allocator.domain.opaque import OpaqueConfig
from dracpu.core.cpuset import CPUSet
from dracpu.core.errors import ConflictError, DracpuError, InsufficientCPUsError
from dracpu.core.machine import Machine

Machines = Callable[[str], Machine]


def devices(machine: Machine, **options: Any) -> DeviceModel:
    return build_devices(machine, DeviceOptions(**options))


def state_for(machine: Machine, **options: Any) -> NodeState:
    return NodeState(machine=machine, devices=devices(machine, **options))


def published(state: NodeState) -> DeviceModel:
    return build_devices(state.machine, state.devices.options, state.withheld)


def grouped(uid: str, count: int, device: str = "cpudevnuma000") -> PrepareInput:
    result = ResultInput(
        request="cpus", device=device, pool="node", consumed={"dra.cpu/cpu": str(count)}
    )
    return PrepareInput(uid=uid, namespace="ns", name=uid, results=(result,))


def individual(uid: str, *names: str) -> PrepareInput:
    results = tuple(ResultInput(request="cpus", device=n, pool="node") for n in names)
    return PrepareInput(uid=uid, namespace="ns", name=uid, results=results)


def offered(model: DeviceModel) -> dict[str, str]:
    """Device name -> its CPUs (and capacity, for a group)."""
    return {
        d.name: d.cpus.format() + (f" x{d.capacity['dra.cpu/cpu']}" if d.capacity else "")
        for d in model.devices
    }


def reopened(state: NodeState, **options: Any) -> NodeState:
    """The same claims under another configuration, as after a restart with new options."""
    return NodeState(
        machine=state.machine, devices=devices(state.machine, **options), records=state.records
    )


# ---- the shared-pool floor ----------------------------------------------------------------------


@dataclass(frozen=True)
class FloorCase:
    id: str
    options: dict[str, Any]
    offered: dict[str, str]


FLOOR = [
    FloorCase(
        "no-floor-publishes-everything",
        {"mode": "individual"},
        {f"cpudev{n:03d}": str(cpu) for n, cpu in enumerate([0, 4, 1, 5, 2, 6, 3, 7])},
    ),
    FloorCase(
        "individual-leaves-out-the-lowest-cpu-names-unchanged",
        {"mode": "individual", "min_shared": 1},
        {f"cpudev{n:03d}": str(cpu) for n, cpu in enumerate([0, 4, 1, 5, 2, 6, 3, 7]) if cpu},
    ),
    FloorCase(
        "floor-is-taken-above-the-reserved-cpus",
        {"mode": "individual", "min_shared": 2, "reserved": CPUSet.parse("0,4")},
        # Reserved: core 0. Floor: core 1 (CPUs 1,5 = cpudev000/001).
        {"cpudev002": "2", "cpudev003": "6", "cpudev004": "3", "cpudev005": "7"},
    ),
    FloorCase("grouped-capacity-shrinks", {"min_shared": 2}, {"cpudevnuma000": "1-3,5-7 x6"}),
    FloorCase(
        "machine-group", {"group_by": "machine", "min_shared": 1}, {"cpudevmachine": "1-7 x7"}
    ),
    FloorCase("floor-as-large-as-the-node-publishes-nothing", {"min_shared": 8}, {}),
]


@pytest.mark.parametrize("case", FLOOR, ids=lambda c: c.id)
def test_the_floor_is_never_published(machines: Machines, case: FloorCase) -> None:
    state = state_for(machines("single-4c8t"), **case.options)
    assert offered(published(state)) == case.offered


def test_claiming_everything_published_leaves_the_floor_shared(machines: Machines) -> None:
    # The defect this rule fixes: two 1-CPU claims on a 2-CPU node emptied the shared pool.
    state = state_for(machines("small-vm"), min_shared=1)
    (device,) = published(state).devices
    assert device.capacity == {"dra.cpu/cpu": "1"}
    state = claims.prepare(state, grouped("a", 1), 1).state
    assert state.shared == CPUSet.parse("0")
    with pytest.raises(InsufficientCPUsError, match="cannot take 1 CPUs"):
        claims.prepare(state, grouped("b", 1), 2)
    assert not published(state).devices or all(
        d.cpus.isdisjoint(state.shared) for d in published(state).devices
    )


@dataclass(frozen=True)
class RefusedCase:
    id: str
    options: dict[str, Any]
    request: PrepareInput
    error: type[DracpuError]
    message: str


REFUSED = [
    RefusedCase(
        "individual-device-of-the-floor",
        {"mode": "individual", "min_shared": 1},
        individual("c", "cpudev000"),
        InsufficientCPUsError,
        r"CPU 0 is kept for the shared pool \(at least 1 shared CPUs\)",
    ),
    RefusedCase(
        "grouped-more-than-above-the-floor",
        {"min_shared": 3},
        grouped("c", 6),
        InsufficientCPUsError,
        "cannot take 6 CPUs",
    ),
    RefusedCase(
        "explicit-cpuset-on-the-floor",
        {"group_by": "machine", "min_shared": 1},
        PrepareInput(
            uid="c",
            namespace="ns",
            name="c",
            results=(
                ResultInput(
                    request="cpus",
                    device="cpudevmachine",
                    pool="node",
                    consumed={"dra.cpu/cpu": "2"},
                ),
            ),
            configs=(
                OpaqueConfig(
                    source="FromClaim",
                    requests=(),
                    driver="dra.cpu",
                    parameters=b'{"apiVersion":"v1alpha1","cpuConfig":{"cpuset":"0-1"}}',
                ),
            ),
        ),
        InsufficientCPUsError,
        "CPUs 0 are kept for the shared pool",
    ),
]


@pytest.mark.parametrize("case", REFUSED, ids=lambda c: c.id)
def test_prepare_refuses_to_eat_into_the_floor(machines: Machines, case: RefusedCase) -> None:
    state = state_for(machines("single-4c8t"), **case.options)
    with pytest.raises(case.error, match=case.message):
        claims.prepare(state, case.request, 1)


# ---- claims the current devices do not account for -------------------------------------------


@dataclass(frozen=True)
class ChangeCase:
    id: str
    before: dict[str, Any]
    claims: tuple[PrepareInput, ...]
    after: dict[str, Any]
    offered: dict[str, str]
    unaccounted: str = ""
    refused: PrepareInput | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)


CHANGES = [
    ChangeCase(
        "grouped-claim-then-individual",
        {},
        (grouped("g", 2),),
        {"mode": "individual"},
        # The grouped claim got CPUs 0,4 (one whole core): their devices stay unpublished.
        {f"cpudev{n:03d}": str(cpu) for n, cpu in enumerate([0, 4, 1, 5, 2, 6, 3, 7]) if n > 1},
        unaccounted="0,4",
        refused=individual("new", "cpudev000"),
    ),
    ChangeCase(
        "individual-claims-then-grouped",
        {"mode": "individual"},
        (individual("i", "cpudev002", "cpudev003"),),
        {},
        {"cpudevnuma000": "0,2-4,6-7 x6"},
        unaccounted="1,5",
    ),
    ChangeCase(
        "numanode-then-machine-grouping",
        {},
        (grouped("g", 3),),
        {"group_by": "machine"},
        {"cpudevmachine": "2-3,5-7 x5"},
        unaccounted="0-1,4",
    ),
    ChangeCase(
        "same-configuration-counts-on-the-scheduler",
        {"mode": "individual"},
        (individual("i", "cpudev002"),),
        {"mode": "individual"},
        {f"cpudev{n:03d}": str(cpu) for n, cpu in enumerate([0, 4, 1, 5, 2, 6, 3, 7])},
    ),
    ChangeCase(
        "reserved-change-renumbers-individual-devices",
        {"mode": "individual"},
        (individual("i", "cpudev002"),),  # CPU 1
        {"mode": "individual", "reserved": CPUSet.parse("0")},
        # Cores are ordered by their first unreserved CPU, so CPU 4 comes last and cpudev002
        # is now CPU 2: the claim's CPU 1 (now cpudev000) is left out.
        {f"cpudev{n:03d}": str(cpu) for n, cpu in enumerate([1, 5, 2, 6, 3, 7, 4]) if cpu != 1},
        unaccounted="1",
        refused=individual("new", "cpudev000"),
    ),
    ChangeCase(
        "floor-steps-around-a-claim-on-cpu-0",
        {"mode": "individual"},
        (individual("i", "cpudev000"),),  # CPU 0, prepared before any floor
        {"mode": "individual", "min_shared": 1},
        # CPU 0 is the claim's and the scheduler knows it; the floor is CPU 4, the next free.
        {f"cpudev{n:03d}": str(cpu) for n, cpu in enumerate([0, 4, 1, 5, 2, 6, 3, 7]) if cpu != 4},
    ),
]


@pytest.mark.parametrize("case", CHANGES, ids=lambda c: c.id)
def test_a_changed_configuration_never_offers_a_held_cpu(
    machines: Machines, case: ChangeCase
) -> None:
    state = state_for(machines("single-4c8t"), **case.before)
    for n, request in enumerate(case.claims):
        state = claims.prepare(state, request, n).state
    after = reopened(state, **case.after)
    model = published(after)
    assert offered(model) == case.offered
    assert after.unaccounted == CPUSet.parse(case.unaccounted)
    for device in model.devices:
        for record in after.records.values():
            if not claims.accounted(record, after.devices):
                assert device.cpus.isdisjoint(record.cpus), (device.name, record.uid)
    if case.refused is not None:
        with pytest.raises(ConflictError, match="overlapping device assignment"):
            claims.prepare(after, case.refused, 9)


def test_a_released_foreign_claim_is_offered_again(machines: Machines) -> None:
    state = state_for(machines("single-4c8t"))
    state = claims.prepare(state, grouped("g", 2), 1).state
    after = reopened(state, mode="individual")
    assert "cpudev000" not in published(after).by_name
    released, record = claims.unprepare(after, "g")
    assert record is not None and not released.unaccounted
    assert published(released).by_name["cpudev000"].cpus == CPUSet.parse("0")


def test_a_claim_seen_only_in_a_containers_env_withholds_nothing_until_prepared(
    machines: Machines,
) -> None:
    # A container's env cannot be trusted, so adopting it quarantines the claim: no CPU is
    # taken, none withheld from the devices; the kubelet's prepare then confirms it in place.
    state = state_for(machines("single-4c8t"), mode="individual")
    container = claims.Container("ctr", claims.Owner("pod", "c"))
    adopted = claims.adopt(state, container, {"r": CPUSet.parse("1")}, 1).state
    assert "r" in adopted.quarantined
    assert not adopted.unaccounted
    assert published(adopted).by_name["cpudev002"].cpus == CPUSet.parse("1")
    completed = claims.prepare(adopted, individual("r", "cpudev002"), 2).state
    assert not completed.unaccounted
    assert completed.records["r"].cpus == CPUSet.parse("1")
    assert published(completed).by_name["cpudev002"].cpus == CPUSet.parse("1")
