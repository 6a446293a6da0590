"""From a ResourceClaim object (API JSON shape) to the allocator's PrepareRequest.

Pure functions: no I/O. The checks are the ones the kubelet plugin helper makes before driver
code runs (kubernetes/dynamic-resource-allocation kubeletplugin/draplugin.go,
getResourceClaims), but each failure stays with its claim instead of failing the whole call.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dracpu.core.driver import CPU_CAPACITY
from dracpu.core.errors import ConflictError, InvalidInputError
from dracpu.core.names import (
    MAX_LABEL,
    MAX_SUBDOMAIN,
    check_namespace,
    check_object_name,
    check_uid,
)
from dracpu.core.quantity import whole_quantity
from dracpu.pb.allocator.v1 import allocator_pb2

# The metadata attribute under the name kubelet.node_service imports it by.
# resource.k8s.io/v1 PodResourceClaimAnnotation: set on claims generated from a template.
POD_CLAIM_NAME_ANNOTATION = "resource.kubernetes.io/pod-claim-name"


@dataclass(frozen=True)
class ClaimRef:
    """What the kubelet sends for a claim: namespace, name and the UID it expects."""

    namespace: str
    name: str
    uid: str

    def __str__(self) -> str:
        return f"{self.namespace[:MAX_LABEL]}/{self.name[:MAX_SUBDOMAIN]}"

    def check(self) -> ClaimRef:
        """The kubelet's names as the API server accepts them: a namespace or name with '/'
        or '..' would otherwise turn into a path outside the metadata or cluster folders."""
        check_namespace(self.namespace, "claim namespace")
        check_object_name(self.name, "claim name")
        check_uid(self.uid)
        return self


def _mapping(value: object, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidInputError(f"{where}: expected an object, got {type(value).__name__}")
    return value


def _list(value: object, where: str) -> Sequence[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise InvalidInputError(f"{where}: expected a list, got {type(value).__name__}")
    return value


def _text(value: object) -> str:
    return "" if value is None else str(value)


def base_request(name: str) -> str:
    """`req/sub` names a subrequest of `req`; the kubelet only knows `req`."""
    return name.split("/", 1)[0]


def allocation_of(ref: ClaimRef, claim: Mapping[str, Any]) -> Mapping[str, Any]:
    """The claim's status.allocation after the UID and allocation checks."""
    metadata = _mapping(claim.get("metadata"), f"claim {ref}: metadata")
    if _text(metadata.get("uid")) != ref.uid:
        raise ConflictError(f"claim {ref} got replaced")
    status = _mapping(claim.get("status"), f"claim {ref}: status")
    allocation = status.get("allocation")
    if not allocation:
        raise ConflictError(f"claim {ref} not allocated")
    return _mapping(allocation, f"claim {ref}: status.allocation")


def reserved_pods(ref: ClaimRef, claim: Mapping[str, Any]) -> list[str]:
    """The UIDs of the pods in status.reservedFor (core-group `pods` entries): the only pods
    whose containers may use the claim's CPUs."""
    status = _mapping(claim.get("status"), f"claim {ref}: status")
    pods = []
    for index, item in enumerate(_list(status.get("reservedFor"), f"claim {ref}: reservedFor")):
        entry = _mapping(item, f"claim {ref}: status.reservedFor[{index}]")
        if _text(entry.get("resource")) == "pods" and not entry.get("apiGroup"):
            uid = _text(entry.get("uid"))
            if uid:
                pods.append(uid)
    return pods


def pod_claim_name(claim: Mapping[str, Any]) -> str | None:
    metadata = _mapping(claim.get("metadata"), "claim metadata")
    annotations = _mapping(metadata.get("annotations"), "claim annotations")
    value = annotations.get(POD_CLAIM_NAME_ANNOTATION)
    return str(value) if value else None


def prepare_request(
    ref: ClaimRef, claim: Mapping[str, Any], driver: str
) -> allocator_pb2.PrepareRequest | None:
    """The allocator request for this driver's part of the claim; None if it has no part."""
    allocation = allocation_of(ref, claim)
    devices = _mapping(allocation.get("devices"), f"claim {ref}: status.allocation.devices")
    request = allocator_pb2.PrepareRequest(
        claim_uid=ref.uid,
        namespace=ref.namespace,
        name=ref.name,
        reserved_for_pod_uids=reserved_pods(ref, claim),
        reserved_for_known=True,
    )
    for index, item in enumerate(_list(devices.get("results"), f"claim {ref}: results")):
        where = f"claim {ref}: status.allocation.devices.results[{index}]"
        result = _mapping(item, where)
        if _text(result.get("driver")) != driver:
            continue
        if result.get("adminAccess"):
            raise InvalidInputError(
                f"claim {ref}: request {_text(result.get('request'))!r} asks for adminAccess, "
                f"which {driver} does not support"
            )
        consumed = _mapping(result.get("consumedCapacity"), f"{where}.consumedCapacity")
        request.results.append(
            allocator_pb2.AllocationResult(
                request=_text(result.get("request")),
                driver=driver,
                pool=_text(result.get("pool")),
                device=_text(result.get("device")),
                consumed_capacity={str(k): _text(v) for k, v in consumed.items()},
                admin_access=False,
            )
        )
    if not request.results:
        return None
    for index, item in enumerate(_list(devices.get("config"), f"claim {ref}: config")):
        where = f"claim {ref}: status.allocation.devices.config[{index}]"
        config = _mapping(item, where)
        opaque = _mapping(config.get("opaque"), f"{where}.opaque")
        if _text(opaque.get("driver")) != driver:
            continue
        parameters = opaque.get("parameters")
        request.configs.append(
            allocator_pb2.OpaqueConfig(
                source=_text(config.get("source")),
                requests=[_text(r) for r in _list(config.get("requests"), f"{where}.requests")],
                driver=driver,
                parameters=b"" if parameters is None else json.dumps(parameters).encode(),
            )
        )
    return request


def share_ids(claim: Mapping[str, Any], driver: str) -> dict[tuple[str, str, str], str]:
    """(request, pool, device) -> shareID of this driver's results on devices that allow
    multiple allocations; the kubelet's v1 Device carries it back."""
    status = claim.get("status")
    allocation = status.get("allocation") if isinstance(status, Mapping) else None
    devices = allocation.get("devices") if isinstance(allocation, Mapping) else None
    results = devices.get("results") if isinstance(devices, Mapping) else None
    out: dict[tuple[str, str, str], str] = {}
    for result in results if isinstance(results, list) else []:
        if isinstance(result, Mapping) and result.get("driver") == driver and result.get("shareID"):
            key = (
                _text(result.get("request")),
                _text(result.get("pool")),
                _text(result.get("device")),
            )
            out[key] = _text(result.get("shareID"))
    return out


def allocated_cpus(request: allocator_pb2.PrepareRequest) -> dict[tuple[str, str], int]:
    """(request, device) -> CPUs consumed from a grouped device, for device metadata."""
    counts: dict[tuple[str, str], int] = {}
    for result in request.results:
        if CPU_CAPACITY not in result.consumed_capacity:
            continue
        try:
            count = whole_quantity(result.consumed_capacity[CPU_CAPACITY], CPU_CAPACITY)
        except InvalidInputError:
            continue  # the allocator refuses it; no metadata to describe
        if count >= 0:
            key = (result.request, result.device)
            counts[key] = counts.get(key, 0) + count
    return counts
