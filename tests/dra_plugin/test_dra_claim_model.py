"""The ResourceClaim model (common.resource_claim) and its translations, as properties.

A claim's JSON, with other drivers' results, configurations and status entries and fields the
driver does not read around it, parses to exactly the model it was written from; a status entry
written back reads as the model it came from, and the JSON of an entry reads back to the same
JSON; a model's PrepareRequest reaches the allocator (rpc.wire) as the same claim. Malformed
claims fail with an InvalidInputError naming the path of the bad field, never another error.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from harness.claim_records import labels, uids
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dracpu.allocator.rpc.wire import prepare_input
from dracpu.core.errors import InvalidInputError
from dracpu.dra_plugin.common.claim_request import prepare_request
from dracpu.dra_plugin.common.resource_claim import (
    POD_CLAIM_NAME_ANNOTATION,
    ClaimRef,
    Condition,
    DeviceResult,
    DeviceStatus,
    OpaqueConfig,
    ResourceClaim,
    parse_claim,
    parse_device_status,
)

DRIVER = "dra.cpu"
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

texts = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), max_size=20)
quantities = st.sampled_from(["1", "2", "4", "4000m", "1Gi", "64Mi"])
JSON_LEAF = st.none() | st.booleans() | st.integers(-(2**40), 2**40) | texts
JSON_VALUE = st.recursive(
    JSON_LEAF,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(labels, inner, max_size=3),
    max_leaves=8,
)

results = st.builds(
    DeviceResult,
    request=st.one_of(labels, st.builds(lambda a, b: f"{a}/{b}", labels, labels)),
    driver=st.just(DRIVER),
    pool=labels,
    device=labels,
    consumed_capacity=st.lists(st.tuples(labels.map(lambda n: f"{DRIVER}/{n}"), quantities),
                               max_size=2, unique_by=lambda pair: pair[0]).map(tuple),
    admin_access=st.just(False),
    share_id=st.just("") | uids,
)  # fmt: skip
configs = st.builds(
    OpaqueConfig,
    source=st.sampled_from(["FromClaim", "FromClass"]),
    requests=st.lists(labels, max_size=3).map(tuple),
    driver=st.just(DRIVER),
    parameters=st.just(b"")
    | JSON_VALUE.filter(lambda v: v is not None).map(lambda v: json.dumps(v).encode()),
)
conditions = st.builds(
    Condition,
    type=st.sampled_from(["Ready", "Other"]),
    status=st.sampled_from(["True", "False", "Unknown"]),
    reason=st.sampled_from(["", "Prepared", "PrepareFailed"]),
    message=texts,
    last_transition_time=st.just("2026-01-02T03:04:05Z"),
    observed_generation=st.integers(0, 10),
)
device_statuses = st.builds(
    DeviceStatus,
    driver=st.just(DRIVER),
    pool=labels,
    device=labels,
    share_id=st.just("") | uids,
    conditions=st.lists(conditions, max_size=2).map(tuple),
    data=st.none() | st.dictionaries(labels, JSON_VALUE, max_size=3),
)


@st.composite
def claims(draw: Any) -> ResourceClaim:
    allocated = draw(st.booleans())
    return ResourceClaim(
        namespace=draw(labels),
        name=draw(labels),
        uid=draw(uids),
        generation=draw(st.integers(0, 100)),
        pod_claim_name=draw(st.none() | labels),
        allocated=allocated,
        results=tuple(draw(st.lists(results, max_size=4))) if allocated else (),
        configs=tuple(draw(st.lists(configs, max_size=3))) if allocated else (),
        reserved_pods=tuple(draw(st.lists(uids, max_size=3))),
        devices=tuple(draw(st.lists(device_statuses, max_size=3))),
    )


def claim_json(claim: ResourceClaim, noise: bool) -> dict[str, Any]:
    """The claim as the API server serves it; with `noise`, what the driver does not read
    (another driver's parts, other consumers, fields of the spec and metadata) around it."""
    metadata: dict[str, Any] = {"name": claim.name, "namespace": claim.namespace,
                                "uid": claim.uid}  # fmt: skip
    if claim.generation:
        metadata["generation"] = claim.generation
    if claim.pod_claim_name is not None:
        metadata["annotations"] = {POD_CLAIM_NAME_ANNOTATION: claim.pod_claim_name}
    status: dict[str, Any] = {}
    if claim.allocated:
        result_entries: list[dict[str, Any]] = []
        for r in claim.results:
            entry: dict[str, Any] = {"request": r.request, "driver": r.driver, "pool": r.pool,
                                     "device": r.device}  # fmt: skip
            if r.consumed_capacity:
                entry["consumedCapacity"] = dict(r.consumed_capacity)
            if r.share_id:
                entry["shareID"] = r.share_id
            result_entries.append(entry)
        config_entries: list[dict[str, Any]] = []
        for c in claim.configs:
            opaque: dict[str, Any] = {"driver": c.driver}
            if c.parameters:
                opaque["parameters"] = json.loads(c.parameters)
            config_entries.append({"source": c.source, "requests": list(c.requests),
                                   "opaque": opaque})  # fmt: skip
        if noise:
            result_entries.insert(
                0,
                {
                    "request": "gpu",
                    "driver": "gpu.example.com",
                    "pool": 7,
                    "device": ["not", "read"],
                    "adminAccess": "yes",
                },
            )
            config_entries.append(
                {
                    "source": "FromClass",
                    "requests": "x",
                    "opaque": {"driver": "gpu.example.com", "parameters": 3},
                }
            )
        devices: dict[str, Any] = {"results": result_entries}
        if config_entries:
            devices["config"] = config_entries
        status["allocation"] = {"devices": devices, "nodeSelector": {"x": 1}}
    reserved: list[dict[str, Any]] = [{"resource": "pods", "name": "p", "uid": uid}
                                      for uid in claim.reserved_pods]  # fmt: skip
    entries = [d.to_json() for d in claim.devices]
    if noise:
        reserved.insert(1, {"resource": "pods", "apiGroup": "example.com", "name": "w", "uid": "w"})
        reserved.append({"resource": "jobs", "apiGroup": "batch", "name": "j", "uid": "j-1"})
        entries.append({"driver": "net.example.com", "pool": 1, "conditions": "not read"})
        metadata["labels"] = {"app": "x"}
        metadata["resourceVersion"] = "42"
    if reserved:
        status["reservedFor"] = reserved
    if entries:
        status["devices"] = entries
    obj: dict[str, Any] = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                           "metadata": metadata, "status": status}  # fmt: skip
    if noise:
        obj["spec"] = {"devices": {"requests": [{"name": "cpus", "exactly": {"count": 2}}]}}
    return obj


@SETTINGS
@given(claims(), st.booleans())
def test_a_claims_json_parses_to_the_model_it_was_written_from(
    claim: ResourceClaim, noise: bool
) -> None:
    assert parse_claim(claim_json(claim, noise), DRIVER) == claim


@SETTINGS
@given(device_statuses)
def test_a_status_entry_written_back_reads_as_the_entry(entry: DeviceStatus) -> None:
    assert parse_device_status(entry.to_json(), "entry", DRIVER) == entry


@SETTINGS
@given(device_statuses)
def test_a_status_entrys_json_reads_back_to_the_same_json(entry: DeviceStatus) -> None:
    written = json.loads(json.dumps(entry.to_json()))
    parsed = parse_device_status(written, "entry", DRIVER)
    assert parsed is not None and parsed.to_json() == written


@SETTINGS
@given(claims())
def test_a_models_prepare_request_reaches_the_allocator_as_the_same_claim(
    claim: ResourceClaim,
) -> None:
    ref = ClaimRef(claim.namespace, claim.name, claim.uid)
    if not claim.allocated or not claim.results:
        return
    request = prepare_request(ref, claim)
    assert request is not None
    received = prepare_input(request)
    assert (received.uid, received.namespace, received.name) == (
        claim.uid, claim.namespace, claim.name)  # fmt: skip
    assert [(r.request, r.driver, r.pool, r.device, dict(r.consumed), r.admin_access)
            for r in received.results] == [
        (r.request, r.driver, r.pool, r.device, dict(r.consumed_capacity), False)
        for r in claim.results
    ]  # fmt: skip
    assert [(c.source, c.requests, c.driver, c.parameters) for c in received.configs] == [
        (c.source, c.requests, c.driver, c.parameters) for c in claim.configs
    ]
    assert (received.pods, received.pods_known) == (claim.reserved_pods, True)


def _claim(**status: Any) -> dict[str, Any]:
    return {"metadata": {"uid": "u1", "name": "c", "namespace": "ns"}, "status": status}


def _allocated(**devices: Any) -> dict[str, Any]:
    return _claim(allocation={"devices": devices})


OURS = {"request": "cpus", "driver": DRIVER, "pool": "p", "device": "d"}
MALFORMED: dict[str, tuple[Any, str]] = {
    "not-an-object": ([], "claim: expected an object, got list"),
    "metadata": ({"metadata": "x"}, "claim: metadata: expected an object, got str"),
    "uid": ({"metadata": {"uid": 7}}, "claim: metadata.uid: expected a string, got int"),
    "generation": ({"metadata": {"generation": -1}},
                   "claim: metadata.generation: expected a non-negative integer, got -1"),
    "annotation": ({"metadata": {"annotations": {POD_CLAIM_NAME_ANNOTATION: 3}}},
                   f"metadata.annotations['{POD_CLAIM_NAME_ANNOTATION}']: expected a string"),
    "status": ({"status": []}, "claim: status: expected an object, got list"),
    "allocation": (_claim(allocation=[1]), "status.allocation: expected an object, got list"),
    "results": (_allocated(results={}), "status.allocation.devices.results: expected a list"),
    "result": (_allocated(results=["x"]),
               "status.allocation.devices.results[0]: expected an object, got str"),
    "result-driver": (_allocated(results=[{"driver": 1}]),
                      "status.allocation.devices.results[0].driver: expected a string"),
    "pool": (_allocated(results=[OURS, {**OURS, "pool": 1}]),
             "status.allocation.devices.results[1].pool: expected a string, got int"),
    "consumed": (_allocated(results=[{**OURS, "consumedCapacity": {"dra.cpu/cpu": 4}}]),
                 "results[0].consumedCapacity['dra.cpu/cpu']: expected a string, got int"),
    "admin-access": (_allocated(results=[{**OURS, "adminAccess": "yes"}]),
                     "results[0].adminAccess: expected true or false, got str"),
    "config": (_allocated(results=[OURS], config=[{"opaque": []}]),
               "status.allocation.devices.config[0].opaque: expected an object, got list"),
    "config-requests": (_allocated(config=[{"opaque": {"driver": DRIVER}, "requests": "cpus"}]),
                        "status.allocation.devices.config[0].requests: expected a list"),
    "reserved-for": (_claim(reservedFor=[{"resource": "pods", "uid": 5}]),
                     "status.reservedFor[0].uid: expected a string, got int"),
    "status-devices": (_claim(devices=[{"driver": DRIVER, "conditions": [[]]}]),
                       "status.devices[0].conditions[0]: expected an object, got list"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_malformed_claim_names_the_bad_fields_path(case: str) -> None:
    obj, message = MALFORMED[case]
    with pytest.raises(InvalidInputError, match=re.escape(message)):
        parse_claim(obj, DRIVER)


@SETTINGS
@given(JSON_VALUE, st.sampled_from(["metadata", "status", "allocation", "results", "config"]))
def test_any_json_in_any_place_is_a_claim_or_an_invalid_input(value: Any, place: str) -> None:
    obj = {
        "metadata": value if place == "metadata" else {"uid": "u"},
        "status": value if place == "status" else {
            "allocation": value if place == "allocation" else {
                "devices": {"results": value if place == "results" else [{**OURS, "x": value}],
                            "config": value if place == "config" else []},
            },
        },
    }  # fmt: skip
    try:
        parse_claim(obj, DRIVER)
    except InvalidInputError as exc:
        assert str(exc).startswith("claim")
