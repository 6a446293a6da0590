"""From a ResourceClaim (`common.resource_claim`) to the allocator's PrepareRequest.

Pure functions: no I/O. The checks are the ones the kubelet plugin helper makes before driver
code runs (kubernetes/dynamic-resource-allocation kubeletplugin/draplugin.go,
getResourceClaims), but each failure stays with its claim instead of failing the whole call.
"""

from __future__ import annotations

from dracpu.core.driver import CPU_CAPACITY
from dracpu.core.errors import ConflictError, InvalidInputError
from dracpu.core.quantity import whole_quantity
from dracpu.dra_plugin.common.resource_claim import ClaimRef, ResourceClaim
from dracpu.pb.allocator.v1 import allocator_pb2


def base_request(name: str) -> str:
    """`req/sub` names a subrequest of `req`; the kubelet only knows `req`."""
    return name.split("/", 1)[0]


def check_allocated(ref: ClaimRef, claim: ResourceClaim) -> ResourceClaim:
    """The claim the kubelet meant (same UID), allocated."""
    if claim.uid != ref.uid:
        raise ConflictError(f"claim {ref} got replaced")
    if not claim.allocated:
        raise ConflictError(f"claim {ref} not allocated")
    return claim


def share_ids(claim: ResourceClaim) -> dict[tuple[str, str, str], str]:
    """(request, pool, device) -> shareID of the results on devices that allow multiple
    allocations; the kubelet's v1 Device carries it back."""
    return {(r.request, r.pool, r.device): r.share_id for r in claim.results if r.share_id}


def prepare_request(ref: ClaimRef, claim: ResourceClaim) -> allocator_pb2.PrepareRequest | None:
    """The allocator request for this driver's part of the claim; None if it has no part."""
    check_allocated(ref, claim)
    for result in claim.results:
        if result.admin_access:
            raise InvalidInputError(
                f"claim {ref}: request {result.request!r} asks for adminAccess, "
                f"which {result.driver} does not support"
            )
    if not claim.results:
        return None
    return allocator_pb2.PrepareRequest(
        claim_uid=ref.uid,
        namespace=ref.namespace,
        name=ref.name,
        reserved_for_pod_uids=claim.reserved_pods,
        reserved_for_known=True,
        results=[
            allocator_pb2.AllocationResult(
                request=r.request,
                driver=r.driver,
                pool=r.pool,
                device=r.device,
                consumed_capacity=dict(r.consumed_capacity),
                admin_access=False,
            )
            for r in claim.results
        ],
        configs=[
            allocator_pb2.OpaqueConfig(
                source=c.source, requests=c.requests, driver=c.driver, parameters=c.parameters
            )
            for c in claim.configs
        ],
    )


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
