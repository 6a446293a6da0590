"""`cpuConfig.sharedPool`: a claim whose configuration includes the shared pool is recorded so,
its container's attach names it, the CPUs are chosen as without the field, and the shared pool
still never holds the claim's CPUs.

Machine: xeon-2s-ht (2 NUMA nodes: node 0 = CPUs 0-9,20-29, node 1 = 10-19,30-39).
"""

from __future__ import annotations

import json
from collections.abc import Callable
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
from dracpu.allocator.live.state import pool_view
from dracpu.allocator.rpc import wire
from dracpu.allocator.store import records
from dracpu.core.cpuset import CPUSet
from dracpu.core.errors import InvalidInputError
from dracpu.core.machine import Machine

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


INCLUDE = config(sharedPool="include")


@pytest.mark.parametrize(
    ("configs", "shares"),
    [
        ((), False),
        ((config(sharedPool="exclude"),), False),
        ((INCLUDE,), True),
        ((config(sharedPool="include", strategy="spread", memoryPlacement="local"),), True),
        # The class's value unless the claim sets its own.
        ((config(source="FromClass", sharedPool="include"),), True),
        (
            (
                config(sharedPool="exclude"),
                config(source="FromClass", sharedPool="include"),
            ),
            False,
        ),
        # A configuration of only sharedPool is not the request's placement: the class may
        # set the policy next to it.
        ((INCLUDE, config(source="FromClass", strategy="spread")), True),
        # Another request's configuration does not reach this one.
        ((config(requests=("other",), sharedPool="include"),), False),
    ],
    ids=[
        "unset-excludes",
        "exclude",
        "include",
        "include-next-to-placement-fields",
        "from-the-class",
        "the-claim-wins-over-the-class",
        "alone-beside-a-class-policy",
        "another-requests-config",
    ],
)
def test_the_record_says_whether_the_container_runs_on_the_pool_too(
    machines: Machines, configs: tuple[OpaqueConfig, ...], shares: bool
) -> None:
    state = state_for(machines("xeon-2s-ht"))
    _, record = prepared(state, claim("c", result("cpudevnuma001", 2), configs=configs))
    assert record.shares_pool is shares


def test_the_cpus_are_chosen_as_without_the_field(machines: Machines) -> None:
    state = state_for(machines("xeon-2s-ht"))
    _, plain = prepared(state, claim("c", result("cpudevnuma001", 4)))
    after, mixed = prepared(state, claim("c", result("cpudevnuma001", 4), configs=(INCLUDE,)))
    assert mixed.cpus == plain.cpus and mixed.policy == plain.policy
    # The claim's CPUs leave the shared pool all the same: no other container gets them.
    assert not after.shared & mixed.cpus
    assert mixed.cpus.issubset(after.exclusive)


def test_one_including_request_gives_the_whole_claims_container_the_pool(
    machines: Machines,
) -> None:
    state = state_for(machines("xeon-2s-ht"))
    request = claim(
        "c",
        result("cpudevnuma000", 2, "a"),
        result("cpudevnuma001", 2, "b"),
        configs=(config(requests=("b",), sharedPool="include"),),
    )
    _, record = prepared(state, request)
    assert record.shares_pool


def test_individual_and_external_modes_take_the_field(machines: Machines) -> None:
    machine = machines("xeon-2s-ht")
    _, individual = prepared(
        state_for(machine, mode="individual"),
        claim("c", result("cpudev005", None), configs=(INCLUDE,)),
    )
    assert individual.shares_pool
    _, external = prepared(
        state_for(machine, allocator="external"),
        claim(
            "c",
            result("cpudevnuma001", 2),
            configs=(config(cpuset="12-13"), config(source="FromClass", sharedPool="include")),
        ),
    )
    assert external.cpus == CPUSet.parse("12-13") and external.shares_pool


@pytest.mark.parametrize(
    ("configs", "message"),
    [
        (
            (config(sharedPool="both"),),
            "opaque config: cpuConfig.sharedPool: 'both' is not one of include, exclude",
        ),
        ((config(sharedPool=True),), "cpuConfig.sharedPool: true is not one of include, exclude"),
        ((config(sharedpool="include"),), "did you mean 'cpuConfig.sharedPool'"),
    ],
    ids=["a-word-outside-its-values", "a-boolean", "a-typo"],
)
def test_a_wrong_value_fails_the_prepare_naming_the_field_and_its_values(
    machines: Machines, configs: tuple[OpaqueConfig, ...], message: str
) -> None:
    state = state_for(machines("xeon-2s-ht"))
    with pytest.raises(InvalidInputError) as caught:
        claims.prepare(state, claim("c", result("cpudevnuma001", 2), configs=configs), 1)
    assert message in str(caught.value)


def test_individual_mode_refuses_placement_fields_next_to_it(machines: Machines) -> None:
    state = state_for(machines("xeon-2s-ht"), mode="individual")
    request = claim(
        "c", result("cpudev005", None), configs=(config(sharedPool="include", strategy="spread"),)
    )
    with pytest.raises(
        InvalidInputError,
        match=r"no configuration but cpuConfig\.memoryPlacement and cpuConfig\.sharedPool",
    ):
        claims.prepare(state, request, 1)


# ---- the container's attach and adopt --------------------------------------------------------


def test_attach_names_the_claims_that_include_the_pool(machines: Machines) -> None:
    state = state_for(machines("xeon-2s-ht"))
    state, a = prepared(state, claim("a", result("cpudevnuma000", 2), configs=(INCLUDE,)))
    state, b = prepared(state, claim("b", result("cpudevnuma001", 2)))
    both = claims.attach(state, Container("cid", OWNER), {"a": a.cpus, "b": b.cpus})
    assert both.shared_pool_claims == ("a",)
    assert both.cpus == a.cpus | b.cpus  # the claims' CPUs; the plugin adds the pool
    alone = claims.attach(state, Container("cid", OWNER), {"b": b.cpus})
    assert alone.shared_pool_claims == ()


def test_adopt_names_the_accepted_claims_that_include_the_pool(machines: Machines) -> None:
    state = state_for(machines("xeon-2s-ht"))
    state, a = prepared(state, claim("a", result("cpudevnuma001", 2), configs=(INCLUDE,)))
    outcome = claims.adopt(
        state, Container("cid", OWNER), {"a": a.cpus, "gone": CPUSet.parse("2")}, 5
    )
    assert outcome.shared_pool_claims == ("a",)
    reply = wire.adopt_response(outcome, pool_view(outcome.state))
    assert list(reply.shared_pool_claims) == ["a"]


def test_the_claim_message_carries_it(machines: Machines) -> None:
    state = state_for(machines("xeon-2s-ht"))
    _, mixed = prepared(state, claim("c", result("cpudevnuma001", 2), configs=(INCLUDE,)))
    _, plain = prepared(state, claim("c", result("cpudevnuma001", 2)))
    assert wire.claim_to_proto(mixed).shares_pool
    assert not wire.claim_to_proto(plain).shares_pool


# ---- the saved record ---------------------------------------------------------------------------


def test_the_record_keeps_it_and_other_records_look_as_before(machines: Machines) -> None:
    state = state_for(machines("xeon-2s-ht"))
    _, mixed = prepared(state, claim("c", result("cpudevnuma001", 2), configs=(INCLUDE,)))
    assert records.record_to_json(mixed)["sharedPool"] == "include"
    assert records.decode_record(records.encode_record(mixed), "t", "c") == mixed
    _, plain = prepared(state, claim("c", result("cpudevnuma001", 2)))
    # No key at all: the file is what an older build writes and reads (as exclude).
    assert "sharedPool" not in records.record_to_json(plain)


def test_a_garbled_value_is_a_corrupt_record(machines: Machines) -> None:
    state = state_for(machines("xeon-2s-ht"))
    _, mixed = prepared(state, claim("c", result("cpudevnuma001", 2), configs=(INCLUDE,)))
    for garbled in (True, "both"):
        body = records.record_to_json(mixed) | {"sharedPool": garbled}
        document = {"formatVersion": 1, "checksum": records.digest(body), "body": body}
        with pytest.raises(records.CorruptRecordError, match="malformed content"):
            records.decode_record(json.dumps(document).encode(), "bad", "c")
