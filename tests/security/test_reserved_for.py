"""reservedFor from the ResourceClaim to the allocator's record: the dra-plugin passes the
claim's pods, the record keeps them, and records of an older build (without them) still load."""

from __future__ import annotations

from typing import Any

import pytest

from dracpu.allocator.claims import ClaimRecord
from dracpu.allocator.store import records
from dracpu.core.cpuset import CPUSet
from dracpu.dra_plugin.common.claim_request import prepare_request
from dracpu.dra_plugin.common.resource_claim import ClaimRef, parse_claim

pytestmark = pytest.mark.security

REF = ClaimRef(namespace="t", name="c", uid="u-1")


def resource_claim(reserved_for: list[dict[str, Any]] | None) -> dict[str, Any]:
    status: dict[str, Any] = {
        "allocation": {
            "devices": {
                "results": [
                    {
                        "request": "cpus",
                        "driver": "dra.cpu",
                        "pool": "n",
                        "device": "cpudevnuma000",
                        "consumedCapacity": {"dra.cpu/cpu": "2"},
                    }
                ]
            }
        }
    }
    if reserved_for is not None:
        status["reservedFor"] = reserved_for
    return {"metadata": {"uid": "u-1", "name": "c", "namespace": "t"}, "status": status}


@pytest.mark.parametrize(
    ("reserved_for", "pods"),
    [
        ([{"resource": "pods", "name": "a", "uid": "pod-a"}], ["pod-a"]),
        (
            [
                {"resource": "pods", "name": "a", "uid": "pod-a"},
                {"resource": "pods", "name": "b", "uid": "pod-b", "apiGroup": ""},
            ],
            ["pod-a", "pod-b"],
        ),
        ([{"resource": "widgets", "apiGroup": "example.com", "name": "w", "uid": "w-1"}], []),
        (None, []),
    ],
    ids=["one-pod", "two-pods", "not-a-pod", "none"],
)
def test_the_dra_plugin_passes_the_reserved_pods(
    reserved_for: list[dict[str, Any]] | None, pods: list[str]
) -> None:
    request = prepare_request(REF, parse_claim(resource_claim(reserved_for), "dra.cpu"))
    assert request is not None
    assert list(request.reserved_for_pod_uids) == pods and request.reserved_for_known


def record(**fields: Any) -> ClaimRecord:
    return ClaimRecord(
        uid="u-1",
        namespace="t",
        name="c",
        cpus=CPUSet.parse("2-3"),
        allocations=(),
        prepared_at_ns=1,
        **fields,
    )


def test_a_record_keeps_its_pods() -> None:
    saved = record(pods=("pod-a",), pods_known=True)
    assert records.decode_record(records.encode_record(saved), "x", "u-1") == saved


def test_a_record_of_an_older_build_loads_without_pods() -> None:
    body = records.record_to_json(record())
    assert "reservedFor" not in body
    loaded = records.record_from_json(body)
    assert loaded.pods == () and not loaded.pods_known


def test_a_record_with_malformed_pods_is_not_trusted() -> None:
    body = records.record_to_json(record()) | {"reservedFor": "pod-a"}
    with pytest.raises(TypeError):
        records.record_from_json(body)
