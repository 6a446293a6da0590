"""Every rule of Prepare, Unprepare, Attach, Detach and Adopt, one table row each.

Machine: xeon-2s-ht (NUMA 0 = CPUs 0-9,20-29, NUMA 1 = 10-19,30-39; siblings n / n+20) with
CPUs 0 and 20 reserved, unless a row says otherwise.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from dracpu.allocator import claims
from dracpu.allocator.claims import Container, NodeState, Owner, PrepareInput, ResultInput
from dracpu.allocator.domain.devices import DeviceOptions, build_devices
from dracpu.allocator.domain.opaque import OpaqueConfig
from dracpu.core.cpuset import CPUSet
from dracpu.core.errors import (
    ConflictError,
    DracpuError,
    InsufficientCPUsError,
    InvalidInputError,
    NotFoundError,
)
from dracpu.core.machine import Machine

Machines = Callable[[str], Machine]
RESERVED = CPUSet.parse("0,20")


def state_for(machine: Machine, **options: Any) -> NodeState:
    options.setdefault("reserved", RESERVED)
    return NodeState(machine=machine, devices=build_devices(machine, DeviceOptions(**options)))


def result(
    device: str, count: str | None = None, request: str = "req", **extra: Any
) -> ResultInput:
    consumed = {} if count is None else {"dra.cpu/cpu": count}
    return ResultInput(request=request, device=device, pool="node", consumed=consumed, **extra)


def config(
    parameters: Any,
    requests: tuple[str, ...] = (),
    source: str = "FromClaim",
    driver: str = "dra.cpu",
) -> OpaqueConfig:
    raw = parameters if isinstance(parameters, bytes) else json.dumps(parameters).encode()
    return OpaqueConfig(source=source, requests=requests, driver=driver, parameters=raw)


def cpu_config(**fields: Any) -> dict[str, Any]:
    return {"apiVersion": "v1alpha1", "cpuConfig": fields}


def claim(uid: str, *results: ResultInput, configs: tuple[OpaqueConfig, ...] = ()) -> PrepareInput:
    return PrepareInput(
        uid=uid, namespace="ns", name=f"name-{uid}", results=results, configs=configs
    )


@dataclass(frozen=True)
class Case:
    id: str
    request: PrepareInput
    error: type[DracpuError] | None = None
    message: str = ""
    cpus: str | None = None  # expected exact CPUs, when the row pins them
    size: int | None = None
    options: dict[str, Any] = field(default_factory=dict)
    before: tuple[PrepareInput, ...] = ()


def run(machine: Machine, case: Case) -> None:
    state = state_for(machine, **case.options)
    for earlier in case.before:
        state = claims.prepare(state, earlier, 1).state
    if case.error is not None:
        with pytest.raises(case.error) as caught:
            claims.prepare(state, case.request, 2)
        assert case.message in str(caught.value)
        return
    outcome = claims.prepare(state, case.request, 2)
    record = outcome.record
    if case.cpus is not None:
        assert record.cpus == CPUSet.parse(case.cpus)
    if case.size is not None:
        assert len(record.cpus) == case.size
    assert record.cpus.isdisjoint(state.exclusive | state.reserved)
    assert outcome.state.shared == state.shared - record.cpus


GROUPED = [
    Case(
        "missing-capacity",
        claim("c", result("cpudevnuma000")),
        InvalidInputError,
        "dra.cpu/cpu is missing",
    ),
    Case(
        "zero-capacity",
        claim("c", result("cpudevnuma000", "0")),
        InvalidInputError,
        "must be positive",
    ),
    Case(
        "negative-capacity",
        claim("c", result("cpudevnuma000", "-2")),
        InvalidInputError,
        "must be positive",
    ),
    Case(
        "fractional-capacity",
        claim("c", result("cpudevnuma000", "1.5")),
        InvalidInputError,
        "whole number",
    ),
    Case(
        "milli-fraction",
        claim("c", result("cpudevnuma000", "500m")),
        InvalidInputError,
        "whole number",
    ),
    Case(
        "not-a-quantity",
        claim("c", result("cpudevnuma000", "four")),
        InvalidInputError,
        "not a quantity",
    ),
    Case("milli-whole", claim("c", result("cpudevnuma000", "2000m")), size=2),
    Case(
        "unknown-device", claim("c", result("cpudevnuma007", "1")), NotFoundError, "no such device"
    ),
    Case(
        "individual-name-in-grouped-mode",
        claim("c", result("cpudev001", "1")),
        NotFoundError,
        "no such device",
    ),
    Case(
        "other-driver",
        claim("c", result("cpudevnuma000", "1", driver="gpu.example.com")),
        InvalidInputError,
        "driver 'gpu.example.com'",
    ),
    Case(
        "admin-access",
        claim("c", result("cpudevnuma000", "1", admin_access=True)),
        InvalidInputError,
        "admin access",
    ),
    Case("no-results", claim("c"), InvalidInputError, "no allocation results"),
    Case(
        "more-than-the-node-has",
        claim("c", result("cpudevnuma000", "19")),
        InsufficientCPUsError,
        "cannot take 19",
    ),
    Case("packed-whole-cores", claim("c", result("cpudevnuma000", "4")), cpus="1-2,21-22"),
    Case(
        "two-results-same-node-disjoint",
        claim("c", result("cpudevnuma000", "9", "a"), result("cpudevnuma000", "9", "b")),
        cpus="1-9,21-29",
    ),
    Case(
        "two-results-exceeding-the-node",
        claim("c", result("cpudevnuma000", "10", "a"), result("cpudevnuma000", "9", "b")),
        InsufficientCPUsError,
        "request 'b'",
    ),
    Case(
        "only-free-cpus",
        claim("c", result("cpudevnuma000", "16")),
        InsufficientCPUsError,
        "from 14 free",
        before=(claim("x", result("cpudevnuma000", "4")),),
    ),
    Case(
        "socket-grouping",
        claim("c", result("cpudevsocket001", "20")),
        cpus="10-19,30-39",
        options={"group_by": "socket"},
    ),
    Case(
        "spread-strategy",
        claim("c", result("cpudevnuma001", "4"), configs=(config(cpu_config(strategy="spread")),)),
        size=4,
    ),
    Case(
        "full-pcpus-odd-count",
        claim("c", result("cpudevnuma001", "3"), configs=(config(cpu_config(fullPCPUsOnly=True)),)),
        DracpuError,  # refused as malformed or as unplaceable, either is precise
        "",
    ),
    Case(
        "class-policy-applies",
        claim(
            "c",
            result("cpudevnuma001", "3"),
            configs=(config(cpu_config(fullPCPUsOnly=True), source="FromClass"),),
        ),
        DracpuError,  # refused as malformed or as unplaceable, either is precise
        "",
    ),
    Case(
        "claim-policy-wins-over-class",
        claim(
            "c",
            result("cpudevnuma001", "3"),
            configs=(
                config(cpu_config(fullPCPUsOnly=True), source="FromClass"),
                config(cpu_config(strategy="packed")),
            ),
        ),
        size=3,
    ),
    Case(
        "spread-with-full-pcpus",
        claim(
            "c",
            result("cpudevnuma001", "4"),
            configs=(config(cpu_config(strategy="spread", fullPCPUsOnly=True)),),
        ),
        InvalidInputError,
        "cannot be combined",
    ),
    Case(
        "full-pcpus-whole-cores",
        claim("c", result("cpudevnuma001", "4"), configs=(config(cpu_config(fullPCPUsOnly=True)),)),
        cpus="10-11,30-31",
    ),
    Case(
        "cpuset-needs-the-external-allocator",
        claim("c", result("cpudevnuma000", "2"), configs=(config(cpu_config(cpuset="2-3")),)),
        InvalidInputError,
        "only valid with allocator external",
    ),
    Case(
        "unknown-policy-field",
        claim("c", result("cpudevnuma000", "2"), configs=(config(cpu_config(stratgy="spread")),)),
        InvalidInputError,
        "unknown field 'cpuConfig.stratgy'",
    ),
    Case(
        "unknown-top-level-field",
        claim("c", result("cpudevnuma000", "2"), configs=(config({**cpu_config(), "kind": "x"}),)),
        InvalidInputError,
        "unknown field 'kind'",
    ),
    Case(
        "bad-strategy",
        claim("c", result("cpudevnuma000", "2"), configs=(config(cpu_config(strategy="scatter")),)),
        InvalidInputError,
        "cpuConfig.strategy",
    ),
    Case(
        "string-for-bool",
        claim(
            "c", result("cpudevnuma000", "2"), configs=(config(cpu_config(fullPCPUsOnly="true")),)
        ),
        InvalidInputError,
        "cpuConfig.fullPCPUsOnly",
    ),
    Case(
        "group-size-without-distribute",
        claim("c", result("cpudevnuma000", "2"), configs=(config(cpu_config(groupSize=2)),)),
        InvalidInputError,
        "needs cpuConfig.distributeAcrossNUMA",
    ),
    Case(
        "group-size-zero",
        claim(
            "c",
            result("cpudevnuma000", "2"),
            configs=(config(cpu_config(distributeAcrossNUMA=True, groupSize=0)),),
        ),
        InvalidInputError,
        "cpuConfig.groupSize",
    ),
    Case(
        "distribute-in-a-socket",
        claim(
            "c",
            result("cpudevsocket000", "4"),
            configs=(config(cpu_config(distributeAcrossNUMA=True, groupSize=2)),),
        ),
        size=4,
        options={"group_by": "socket"},
    ),
    Case(
        "two-claim-configs",
        claim(
            "c", result("cpudevnuma000", "2"), configs=(config(cpu_config()), config(cpu_config()))
        ),
        InvalidInputError,
        "at most 1",
    ),
    Case(
        "wrong-api-version",
        claim(
            "c",
            result("cpudevnuma000", "2"),
            configs=(config({"apiVersion": "v2", "cpuConfig": {}}),),
        ),
        InvalidInputError,
        "unsupported apiVersion 'v2'",
    ),
    Case(
        "not-json",
        claim("c", result("cpudevnuma000", "2"), configs=(config(b"{nope"),)),
        InvalidInputError,
        "not valid JSON",
    ),
    Case(
        "unknown-source",
        claim(
            "c",
            result("cpudevnuma000", "2"),
            configs=(config(cpu_config(), source="FromSomewhere"),),
        ),
        InvalidInputError,
        "source 'FromSomewhere'",
    ),
    Case(
        "other-drivers-config-ignored",
        claim(
            "c", result("cpudevnuma000", "2"), configs=(config(b"{nope", driver="gpu.example.com"),)
        ),
        size=2,
    ),
]

MACHINE = {"group_by": "machine", "allocator": "external"}
NUMA_EXTERNAL = {"group_by": "numanode", "allocator": "external"}
SOCKET_EXTERNAL = {"group_by": "socket", "allocator": "external"}
CPUSET_2_5 = config(cpu_config(cpuset="2-5"), requests=("req",))

EXPLICIT = [
    Case(
        "explicit-cpuset",
        claim("c", result("cpudevmachine", "4"), configs=(CPUSET_2_5,)),
        cpus="2-5",
        options=MACHINE,
    ),
    Case(
        "config-for-all-requests",
        claim("c", result("cpudevmachine", "4"), configs=(config(cpu_config(cpuset="2-5")),)),
        cpus="2-5",
        options=MACHINE,
    ),
    Case(
        "subrequest-matches-parent",
        claim("c", result("cpudevmachine", "4", request="req/small"), configs=(CPUSET_2_5,)),
        cpus="2-5",
        options=MACHINE,
    ),
    Case(
        "no-config",
        claim("c", result("cpudevmachine", "4")),
        InvalidInputError,
        "targeted by 0",
        options=MACHINE,
    ),
    Case(
        "config-for-another-request",
        claim(
            "c",
            result("cpudevmachine", "4"),
            configs=(config(cpu_config(cpuset="2-5"), requests=("other",)),),
        ),
        InvalidInputError,
        "targeted by 0",
        options=MACHINE,
    ),
    Case(
        "two-configs",
        claim(
            "c",
            result("cpudevmachine", "4"),
            configs=(CPUSET_2_5, config(cpu_config(cpuset="6-9"))),
        ),
        InvalidInputError,
        "targeted by 2",
        options=MACHINE,
    ),
    Case(
        "from-class",
        claim(
            "c",
            result("cpudevmachine", "4"),
            configs=(config(cpu_config(cpuset="2-5"), source="FromClass"),),
        ),
        InvalidInputError,
        "DeviceClass is not supported",
        options=MACHINE,
    ),
    Case(
        "size-mismatch",
        claim("c", result("cpudevmachine", "3"), configs=(CPUSET_2_5,)),
        InvalidInputError,
        "has 4 CPUs, the request consumed 3",
        options=MACHINE,
    ),
    Case(
        "offline",
        claim("c", result("cpudevmachine", "4"), configs=(config(cpu_config(cpuset="38-41")),)),
        InvalidInputError,
        "offline CPUs 40-41",
        options=MACHINE,
    ),
    Case(
        "reserved",
        claim("c", result("cpudevmachine", "4"), configs=(config(cpu_config(cpuset="0-3")),)),
        InvalidInputError,
        "reserved CPUs 0",
        options=MACHINE,
    ),
    Case(
        "overlap-inside-the-claim",
        claim(
            "c",
            result("cpudevmachine", "4", "a"),
            result("cpudevmachine", "4", "b"),
            configs=(
                config(cpu_config(cpuset="2-5"), ("a",)),
                config(cpu_config(cpuset="5-8"), ("b",)),
            ),
        ),
        InvalidInputError,
        "overlaps another result of the same claim",
        options=MACHINE,
    ),
    Case(
        "taken-by-another-claim",
        claim("c", result("cpudevmachine", "4"), configs=(CPUSET_2_5,)),
        ConflictError,
        "held by claim x",
        options=MACHINE,
        before=(
            claim("x", result("cpudevmachine", "2"), configs=(config(cpu_config(cpuset="5-6")),)),
        ),
    ),
    Case(
        "empty-cpuset",
        claim("c", result("cpudevmachine", "4"), configs=(config(cpu_config(cpuset="")),)),
        InvalidInputError,
        "cpuset is empty",
        options=MACHINE,
    ),
    Case(
        "unparsable-cpuset",
        claim("c", result("cpudevmachine", "4"), configs=(config(cpu_config(cpuset="5-2")),)),
        InvalidInputError,
        "cpuConfig.cpuset: reversed range '5-2'",
        options=MACHINE,
    ),
    Case(
        "policy-with-explicit-cpuset",
        claim(
            "c",
            result("cpudevmachine", "4"),
            configs=(config(cpu_config(cpuset="2-5", strategy="spread")),),
        ),
        InvalidInputError,
        "not valid with allocator external",
        options=MACHINE,
    ),
    Case(
        "no-cpuset",
        claim("c", result("cpudevmachine", "4"), configs=(config(cpu_config()),)),
        InvalidInputError,
        "cpuset is missing",
        options=MACHINE,
    ),
    Case(
        "no-cpu-config",
        claim("c", result("cpudevmachine", "4"), configs=(config({"apiVersion": "v1alpha1"}),)),
        InvalidInputError,
        "missing field 'cpuConfig'",
        options=MACHINE,
    ),
]

# The external allocator in the NUMA and socket groupings: the same rules, and the CPUs must
# lie inside the allocated device's node or socket (NUMA 1 = socket 1 = CPUs 10-19,30-39).
EXTERNAL_GROUPED = [
    Case(
        "numa-external-cpuset",
        claim(
            "c", result("cpudevnuma001", "4"), configs=(config(cpu_config(cpuset="12-13,32-33")),)
        ),
        cpus="12-13,32-33",
        options=NUMA_EXTERNAL,
    ),
    Case(
        "socket-external-cpuset",
        claim("c", result("cpudevsocket000", "2"), configs=(config(cpu_config(cpuset="3,23")),)),
        cpus="3,23",
        options=SOCKET_EXTERNAL,
    ),
    Case(
        "numa-external-outside-the-node",
        claim("c", result("cpudevnuma001", "4"), configs=(CPUSET_2_5,)),
        InvalidInputError,
        "has CPUs 2-5 outside the device's numanode (CPUs 10-19,30-39)",
        options=NUMA_EXTERNAL,
    ),
    Case(
        "socket-external-partly-outside",
        claim("c", result("cpudevsocket001", "2"), configs=(config(cpu_config(cpuset="9-10")),)),
        InvalidInputError,
        "has CPUs 9 outside the device's socket",
        options=SOCKET_EXTERNAL,
    ),
    Case(
        "numa-external-absent-cpu",
        claim("c", result("cpudevnuma001", "1"), configs=(config(cpu_config(cpuset="63")),)),
        InvalidInputError,
        "has CPUs 63 outside the device's numanode (CPUs 10-19,30-39), offline CPUs 63",
        options=NUMA_EXTERNAL,
    ),
    Case(
        "numa-external-size-mismatch",
        claim("c", result("cpudevnuma001", "3"), configs=(config(cpu_config(cpuset="10-13")),)),
        InvalidInputError,
        "has 4 CPUs, the request consumed 3",
        options=NUMA_EXTERNAL,
    ),
    Case(
        "numa-external-reserved",
        claim("c", result("cpudevnuma000", "2"), configs=(config(cpu_config(cpuset="0-1")),)),
        InvalidInputError,
        "reserved CPUs 0",
        options=NUMA_EXTERNAL,
    ),
    Case(
        "numa-external-taken-by-another-claim",
        claim("c", result("cpudevnuma001", "2"), configs=(config(cpu_config(cpuset="11-12")),)),
        ConflictError,
        "CPUs 12 are held by claim x",
        options=NUMA_EXTERNAL,
        before=(
            claim("x", result("cpudevnuma001", "2"), configs=(config(cpu_config(cpuset="12-13")),)),
        ),
    ),
    Case(
        "numa-external-shared-pool-floor",
        claim("c", result("cpudevnuma000", "2"), configs=(config(cpu_config(cpuset="1-2")),)),
        InsufficientCPUsError,
        "CPUs 1 are kept for the shared pool (at least 1 shared CPUs)",
        options=NUMA_EXTERNAL | {"min_shared": 1},
    ),
    Case(
        # The message names what the device publishes: CPU 1 is the shared pool's floor.
        "numa-external-outside-names-the-offered-cpus",
        claim("c", result("cpudevnuma000", "1"), configs=(config(cpu_config(cpuset="10")),)),
        InvalidInputError,
        "has CPUs 10 outside the device's numanode (CPUs 2-9,21-29)",
        options=NUMA_EXTERNAL | {"min_shared": 1},
    ),
    Case(
        "numa-external-from-class",
        claim(
            "c",
            result("cpudevnuma001", "2"),
            configs=(config(cpu_config(cpuset="10-11"), source="FromClass"),),
        ),
        InvalidInputError,
        "DeviceClass is not supported",
        options=NUMA_EXTERNAL,
    ),
    Case(
        "numa-external-two-configs",
        claim(
            "c",
            result("cpudevnuma001", "2"),
            configs=(config(cpu_config(cpuset="10-11")), config(cpu_config(cpuset="12-13"))),
        ),
        InvalidInputError,
        "targeted by 2",
        options=NUMA_EXTERNAL,
    ),
    Case(
        "numa-external-no-config",
        claim("c", result("cpudevnuma001", "2")),
        InvalidInputError,
        "targeted by 0",
        options=NUMA_EXTERNAL,
    ),
    Case(
        "numa-external-placement-field",
        claim(
            "c",
            result("cpudevnuma001", "2"),
            configs=(config(cpu_config(cpuset="10-11", fullPCPUsOnly=True)),),
        ),
        InvalidInputError,
        "cpuConfig.fullPCPUsOnly is not valid with allocator external",
        options=NUMA_EXTERNAL,
    ),
    Case(
        "numa-external-two-devices",
        claim(
            "c",
            result("cpudevnuma000", "2", "a"),
            result("cpudevnuma001", "2", "b"),
            configs=(
                config(cpu_config(cpuset="1-2"), ("a",)),
                config(cpu_config(cpuset="10,30"), ("b",)),
            ),
        ),
        cpus="1-2,10,30",
        options=NUMA_EXTERNAL,
    ),
]

INDIVIDUAL = {"mode": "individual"}

SINGLE = [
    # With 0 and 20 reserved, device numbering starts at core 1: cpudev000=1, cpudev001=21.
    Case(
        "devices-map-to-cpus",
        claim("c", result("cpudev000"), result("cpudev001", request="b")),
        cpus="1,21",
        options=INDIVIDUAL,
    ),
    Case(
        "unknown-device",
        claim("c", result("cpudev999")),
        NotFoundError,
        "no such device",
        options=INDIVIDUAL,
    ),
    Case(
        "device-twice",
        claim("c", result("cpudev000"), result("cpudev000", request="b")),
        InvalidInputError,
        "appears twice",
        options=INDIVIDUAL,
    ),
    Case(
        "overlap-with-another-claim",
        claim("c", result("cpudev000")),
        ConflictError,
        "overlapping device assignment: CPU 1 is held by claim x",
        options=INDIVIDUAL,
        before=(claim("x", result("cpudev000")),),
    ),
    Case(
        "config-refused",
        claim("c", result("cpudev000"), configs=(config(cpu_config(strategy="spread")),)),
        InvalidInputError,
        "individual CPU devices take no configuration",
        options=INDIVIDUAL,
    ),
    Case(
        "admin-access",
        claim("c", result("cpudev000", admin_access=True)),
        InvalidInputError,
        "admin access",
        options=INDIVIDUAL,
    ),
]


@pytest.mark.parametrize("case", GROUPED + EXPLICIT + EXTERNAL_GROUPED + SINGLE, ids=lambda c: c.id)
def test_prepare(machines: Machines, case: Case) -> None:
    run(machines("xeon-2s-ht"), case)


# ---- idempotency ------------------------------------------------------------------------------


def test_prepare_again_returns_the_recorded_answer(machines: Machines) -> None:
    state = state_for(machines("xeon-2s-ht"))
    request = claim("c", result("cpudevnuma001", "6"))
    first = claims.prepare(state, request, 1)
    again = claims.prepare(first.state, request, 2)
    assert again.already_prepared and not first.already_prepared
    assert again.record == first.record
    assert again.state is first.state


def test_prepare_again_with_other_results_is_a_conflict(machines: Machines) -> None:
    state = claims.prepare(
        state_for(machines("xeon-2s-ht")), claim("c", result("cpudevnuma001", "6")), 1
    ).state
    with pytest.raises(ConflictError, match="already prepared with different allocation results"):
        claims.prepare(state, claim("c", result("cpudevnuma001", "4")), 2)


def test_unprepare_is_idempotent(machines: Machines) -> None:
    base = state_for(machines("xeon-2s-ht"))
    state = claims.prepare(base, claim("c", result("cpudevnuma001", "6")), 1).state
    after, record = claims.unprepare(state, "c")
    assert record is not None and len(record.cpus) == 6
    assert after.shared == base.shared
    again, nothing = claims.unprepare(after, "c")
    assert nothing is None and again is after


def test_shared_pool_is_online_minus_reserved_minus_exclusive(machines: Machines) -> None:
    state = state_for(machines("xeon-2s-ht"))
    state = claims.prepare(state, claim("a", result("cpudevnuma000", "4")), 1).state
    state = claims.prepare(state, claim("b", result("cpudevnuma001", "3")), 1).state
    assert state.shared == CPUSet.parse("0-39") - RESERVED - state.exclusive
    assert len(state.exclusive) == 7
    summary = claims.summary(state)
    assert (summary.allocated, summary.available, summary.reserved, summary.active_claims) == (
        7,
        31,
        2,
        2,
    )


def test_generations_move_with_changes(machines: Machines) -> None:
    state = state_for(machines("xeon-2s-ht"))
    prepared = claims.prepare(state, claim("a", result("cpudevnuma000", "4")), 1).state
    assert prepared.pool_generation == state.pool_generation + 1
    assert prepared.claims_generation == state.claims_generation + 1


# ---- containers -------------------------------------------------------------------------------

POD_A = Owner(pod_uid="pod-a", container_name="app", pod_namespace="ns", pod_name="a")


def container(cid: str, owner: Owner = POD_A) -> Container:
    return Container(container_id=cid, owner=owner)


@pytest.fixture
def prepared(machines: Machines) -> NodeState:
    state = state_for(machines("xeon-2s-ht"))
    state = claims.prepare(state, claim("one", result("cpudevnuma000", "2")), 1).state
    return claims.prepare(state, claim("two", result("cpudevnuma001", "2")), 1).state


def cpus_of(state: NodeState, uid: str) -> CPUSet:
    return state.records[uid].cpus


def test_attach_binds_the_first_container(prepared: NodeState) -> None:
    outcome = claims.attach(prepared, container("c1"), {"one": cpus_of(prepared, "one")})
    assert outcome.newly_bound and outcome.changed
    assert outcome.cpus == cpus_of(prepared, "one")
    assert outcome.state.records["one"].owner == POD_A
    assert outcome.state.records["one"].container_id == "c1"
    # Attaching does not change the shared pool: the CPUs left it at prepare.
    assert outcome.state.shared == prepared.shared


def test_attach_union_of_several_claims(prepared: NodeState) -> None:
    presented = {"one": cpus_of(prepared, "one"), "two": cpus_of(prepared, "two")}
    outcome = claims.attach(prepared, container("c1"), presented)
    assert outcome.cpus == cpus_of(prepared, "one") | cpus_of(prepared, "two")


@pytest.mark.parametrize(
    ("other", "message"),
    [
        (Owner("pod-a", "sidecar", "ns", "a"), "belongs to ns/a (uid pod-a) container 'app'"),
        (Owner("pod-b", "app", "ns", "b"), "belongs to ns/a (uid pod-a) container 'app'"),
    ],
    ids=["same-pod-other-container", "other-pod-same-name"],
)
def test_a_claim_has_one_container(prepared: NodeState, other: Owner, message: str) -> None:
    bound = claims.attach(prepared, container("c1"), {"one": cpus_of(prepared, "one")}).state
    with pytest.raises(ConflictError, match=re.escape(message)):
        claims.attach(bound, container("c2", other), {"one": cpus_of(prepared, "one")})


def test_a_restarted_container_gets_its_claim_again(prepared: NodeState) -> None:
    bound = claims.attach(prepared, container("c1"), {"one": cpus_of(prepared, "one")}).state
    stopped, uids = claims.detach(bound, "c1")
    assert uids == ["one"]
    assert stopped.records["one"].owner == POD_A and stopped.records["one"].container_id == ""
    again = claims.attach(stopped, container("c1-restarted"), {"one": cpus_of(prepared, "one")})
    assert not again.newly_bound
    assert again.state.records["one"].container_id == "c1-restarted"


def test_attach_refuses_other_cpus(prepared: NodeState) -> None:
    with pytest.raises(ConflictError, match="the claim was prepared with"):
        claims.attach(prepared, container("c1"), {"one": CPUSet.parse("30-31")})


def test_attach_refuses_an_unknown_claim(prepared: NodeState) -> None:
    with pytest.raises(NotFoundError, match="claim nope is not prepared"):
        claims.attach(prepared, container("c1"), {"nope": CPUSet([3])})


def test_attach_is_all_or_nothing(prepared: NodeState) -> None:
    with pytest.raises(ConflictError):
        claims.attach(
            prepared, container("c1"), {"one": cpus_of(prepared, "one"), "two": CPUSet([3])}
        )
    assert prepared.records["one"].owner is None


def test_attach_needs_claims_and_an_id(prepared: NodeState) -> None:
    with pytest.raises(InvalidInputError):
        claims.attach(prepared, container("c1"), {})
    with pytest.raises(InvalidInputError):
        claims.attach(prepared, container(""), {"one": cpus_of(prepared, "one")})


def test_detach_of_an_unknown_container_changes_nothing(prepared: NodeState) -> None:
    assert claims.detach(prepared, "ghost") == (prepared, [])


def test_presented_cpusets_must_parse() -> None:
    with pytest.raises(InvalidInputError, match="claim x: presented cpuset"):
        claims.parse_claim_cpus({"x": "3-1"})


# ---- adopt (recovery from running containers) --------------------------------------------------


@pytest.mark.parametrize("cpus", ["15-16", "1"], ids=["free", "held-by-another-claim"])
def test_adopt_binds_known_claims_and_quarantines_unknown_ones(
    prepared: NodeState, cpus: str
) -> None:
    outcome = claims.adopt(
        prepared,
        container("c1"),
        {"one": cpus_of(prepared, "one"), "lost": CPUSet.parse(cpus)},
        5,
    )
    by_uid = {r.uid: r for r in outcome.results}
    assert by_uid["one"].accepted and not by_uid["one"].recovered
    lost = by_uid["lost"]
    assert not lost.accepted and lost.quarantined and "quarantined" in lost.error
    assert "lost" not in outcome.state.records and outcome.recovered == ()
    assert outcome.state.quarantined["lost"].cpus == CPUSet.parse(cpus)
    assert outcome.state.shared == prepared.shared


@pytest.mark.parametrize(
    ("uid", "cpus", "message"),
    [
        ("lost", "0", "are reserved"),
        ("lost", "41", "not online"),
        ("lost", "", "empty cpuset"),
        ("one", "5", "prepared with"),
    ],
    ids=["reserved", "offline", "empty", "known-other-cpus"],
)
def test_adopt_reports_conflicts(prepared: NodeState, uid: str, cpus: str, message: str) -> None:
    outcome = claims.adopt(prepared, container("c1"), {uid: CPUSet.parse(cpus)}, 5)
    (only,) = outcome.results
    assert not only.accepted and message in only.error
    assert outcome.state is prepared


def test_adopt_refuses_a_claim_owned_elsewhere(prepared: NodeState) -> None:
    bound = claims.attach(prepared, container("c1"), {"one": cpus_of(prepared, "one")}).state
    outcome = claims.adopt(
        bound, container("c9", Owner("pod-z", "x")), {"one": cpus_of(prepared, "one")}, 5
    )
    assert not outcome.results[0].accepted
    assert "belongs to ns/a" in outcome.results[0].error


def test_a_claim_unprepared_under_its_running_container_is_adopted_by_that_container(
    prepared: NodeState,
) -> None:
    # The container keeps the CPUs it runs on; its stop (a detach) gives them back.
    cpus = cpus_of(prepared, "one")
    bound = claims.attach(prepared, container("c1"), {"one": cpus}).state
    draining, _ = claims.unprepare(bound, "one")
    outcome = claims.adopt(draining, container("c1"), {"one": cpus}, 5)
    assert outcome.results[0].accepted and outcome.cpus == cpus
    assert outcome.state is draining and not outcome.state.shared & cpus
    stopped, _ = claims.detach(outcome.state, "c1")
    assert cpus & stopped.shared == cpus and "one" not in stopped.draining


@pytest.mark.parametrize(
    ("cid", "presented"), [("c2", None), ("c1", "15")], ids=["other-container", "other-cpus"]
)
def test_a_claim_unprepared_under_a_running_container_is_refused_to_any_other(
    prepared: NodeState, cid: str, presented: str | None
) -> None:
    cpus = cpus_of(prepared, "one")
    bound = claims.attach(prepared, container("c1"), {"one": cpus}).state
    draining, _ = claims.unprepare(bound, "one")
    shown = CPUSet.parse(presented) if presented else cpus
    outcome = claims.adopt(draining, container(cid), {"one": shown}, 5)
    assert not outcome.results[0].accepted and "it was unprepared" in outcome.results[0].error
    assert outcome.state is draining


def test_a_quarantined_claim_is_confirmed_by_its_prepare(machines: Machines) -> None:
    state = state_for(machines("xeon-2s-ht"))
    adopted = claims.adopt(state, container("c1"), {"u": CPUSet.parse("3-4")}, 5).state
    outcome = claims.prepare(adopted, claim("u", result("cpudevnuma000", "2")), 6)
    assert outcome.confirmed and not outcome.already_prepared
    record = outcome.record
    assert not record.recovered and record.cpus == CPUSet.parse("3-4")
    assert record.name == "name-u" and record.allocations[0].device == "cpudevnuma000"
    assert record.owner == POD_A and record.container_id == "c1"
    assert not outcome.state.quarantined


@pytest.mark.parametrize(
    "request_",
    [claim("u", result("cpudevnuma000", "1")), claim("u", result("cpudevnuma001", "2"))],
    ids=["other-count", "other-device"],
)
def test_a_quarantined_claim_that_does_not_match_gets_fresh_cpus(
    machines: Machines, request_: PrepareInput
) -> None:
    state = state_for(machines("xeon-2s-ht"))
    adopted = claims.adopt(state, container("c1"), {"u": CPUSet.parse("3-4")}, 5).state
    outcome = claims.prepare(adopted, request_, 6)
    assert not outcome.confirmed and outcome.record.owner is None
    assert not outcome.state.quarantined


def test_new_topology_keeps_claims_on_offline_cpus(machines: Machines) -> None:
    machine = machines("xeon-2s-ht")
    state = claims.prepare(state_for(machine), claim("a", result("cpudevnuma001", "2")), 1).state
    smaller = Machine.build([c for c in machine.cpus if c.cpu_id not in state.records["a"].cpus])
    moved = claims.retopologize(
        state, smaller, build_devices(smaller, DeviceOptions(reserved=RESERVED))
    )
    assert "a" in moved.records
    assert [r.uid for r, _ in claims.offline_claims(moved)] == ["a"]
    assert moved.pool_generation == state.pool_generation + 1
