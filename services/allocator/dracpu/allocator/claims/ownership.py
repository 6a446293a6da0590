"""Who may use a claim.

A container presents `DRA_CPUSET_<uid>=<cpus>` in its env, which the pod author controls, so the
env only names the claim. A container is accepted only when its pod is in the claim's namespace
and, when the dra-plugin passed the claim's `status.reservedFor`, among those pods, and when the
claim has no other owner. A claim the allocator has no record of is never created from a
container's env: it is quarantined (no CPUs taken) until a prepare of that claim confirms it.
"""

from __future__ import annotations

from dracpu.allocator.claims.model import ClaimRecord
from dracpu.core.containers import Owner
from dracpu.core.errors import ConflictError, DracpuError, ForbiddenError


def pod_not_allowed(uid: str, record: ClaimRecord, owner: Owner) -> ForbiddenError | None:
    """The refusal when the claim's namespace or reservedFor pods leave out this container's
    pod; None when they allow it."""
    if record.namespace and owner.pod_namespace and owner.pod_namespace != record.namespace:
        return ForbiddenError(
            f"claim {uid} is in namespace {record.namespace!r}; {owner.describe()} is not"
        )
    if record.pods_known and owner.pod_uid not in record.pods:
        reserved = ", ".join(record.pods[:4]) + (" ..." if len(record.pods) > 4 else "")
        return ForbiddenError(
            f"claim {uid} is reserved for pods [{reserved}]; {owner.describe()} is not one"
        )
    return None


def owner_conflict(uid: str, record: ClaimRecord, owner: Owner) -> DracpuError | None:
    """The refusal of this container as the claim's user (its pod not allowed, or the claim
    owned by another container); None when it may use the claim."""
    forbidden = pod_not_allowed(uid, record, owner)
    if forbidden is not None:
        return forbidden
    if record.owner is None or record.owner.key == owner.key:
        return None
    return ConflictError(
        f"claim {uid} belongs to {record.owner.describe()}; it cannot also be used by "
        f"{owner.describe()}"
    )
