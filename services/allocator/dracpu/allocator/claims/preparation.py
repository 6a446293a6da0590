"""Prepare and unprepare: a claim's CPUs taken from the shared pool, the same request again
answered from the record, a quarantined claim confirmed, and a claim forgotten (its CPUs kept
exclusive while its container still runs)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from dracpu.allocator.claims.allocations import (
    allocate,
    check_results,
    complete_recovered,
    result_keys,
)
from dracpu.allocator.claims.memory import wanted
from dracpu.allocator.claims.model import ClaimRecord, PrepareInput
from dracpu.allocator.claims.ownership import pod_not_allowed
from dracpu.allocator.claims.state import NodeState
from dracpu.allocator.domain import opaque
from dracpu.core.cpuset import CPUSet
from dracpu.core.driver import MEMORY_DEVICE_PREFIX
from dracpu.core.errors import ConflictError, DracpuError


@dataclass(frozen=True, slots=True)
class PrepareOutcome:
    state: NodeState
    record: ClaimRecord
    already_prepared: bool
    confirmed: bool = False  # a quarantined claim's CPUs were confirmed by this prepare


def _with_pods(record: ClaimRecord, request: PrepareInput) -> ClaimRecord:
    """The record with the reservedFor pods of this prepare. An older dra-plugin sends none,
    and an empty list (the kubelet prepares only for pods in reservedFor, so only a caller that
    is not the kubelet sends one) says nothing either: both leave what is recorded."""
    if not request.pods_known or not request.pods:
        return record
    pods = tuple(sorted(set(request.pods)))
    if record.pods_known and record.pods == pods:
        return record
    return replace(record, pods=pods, pods_known=True)


def _keep_allowed_owner(record: ClaimRecord) -> ClaimRecord:
    """A recorded owner that the claim's namespace or pods no longer allow is dropped."""
    if record.owner is not None and pod_not_allowed(record.uid, record, record.owner) is not None:
        return replace(record, owner=None, container_id="")
    return record


def _confirm_quarantined(
    state: NodeState, held: ClaimRecord, request: PrepareInput, config: opaque.ClaimConfig
) -> ClaimRecord | None:
    """A prepare of a quarantined claim: the running container's CPUs become the claim's when
    they are still free and account exactly for the allocation results; None otherwise."""
    if not held.cpus.issubset(state.shared):
        return None
    try:
        record = complete_recovered(state, held, request, config)
    except DracpuError:
        return None
    return _keep_allowed_owner(_with_pods(record, request))


def _prepare_again(
    state: NodeState, existing: ClaimRecord, request: PrepareInput, config: opaque.ClaimConfig
) -> PrepareOutcome:
    """A claim already recorded: a recovered one meets its results again; otherwise the same
    results get the recorded answer, and different ones are refused."""
    if existing.recovered:
        record = _keep_allowed_owner(
            _with_pods(complete_recovered(state, existing, request, config), request)
        )
        records = dict(state.records)
        records[request.uid] = record
        return PrepareOutcome(state.with_records(records, pool_changed=False), record, True)
    check_results(request)
    memory = (
        wanted(state, request)
        if any(r.device.startswith(MEMORY_DEVICE_PREFIX) for r in request.results)
        else ()
    )
    if result_keys(request, state) != tuple(a.key for a in existing.allocations) or (
        memory != existing.memory
    ):
        raise ConflictError(
            f"claim {request.uid} is already prepared with different allocation results "
            f"(CPUs {existing.cpus.format()})"
        )
    record = _with_pods(existing, request)
    if record is existing:
        return PrepareOutcome(state, existing, True)
    records = dict(state.records)
    records[request.uid] = record
    return PrepareOutcome(state.with_records(records, pool_changed=False), record, True)


def prepare(state: NodeState, request: PrepareInput, now_ns: int) -> PrepareOutcome:
    """Prepare a claim; the same request again gives the recorded answer.

    The one path of a new claim, in order: the claim's configuration (parsed when it
    arrived), its CPUs and memory nodes chosen for every result at once (`allocate`), its
    record, and the state that holds it."""
    config = request.config if request.config is not None else opaque.parse_configs(request.configs)
    existing = state.records.get(request.uid)
    if existing is not None:
        return _prepare_again(state, existing, request, config)
    leaving = state.draining.get(request.uid)
    if leaving is not None:
        raise ConflictError(
            f"claim {request.uid} was unprepared while container {leaving.container_id} still "
            f"runs on CPUs {leaving.cpus.format()}; it can be prepared again once that stops"
        )
    quarantined = dict(state.quarantined)
    held = quarantined.pop(request.uid, None)
    confirmed = _confirm_quarantined(state, held, request, config) if held is not None else None
    if confirmed is not None:
        record = replace(confirmed, prepared_at_ns=now_ns)
    else:
        allocations, memory, amounts, shares_pool = allocate(state, request, config)
        cpus = CPUSet()
        for allocation in allocations:
            cpus = cpus | allocation.cpus
        record = _with_pods(
            ClaimRecord(
                uid=request.uid,
                namespace=request.namespace,
                name=request.name,
                cpus=cpus,
                allocations=allocations,
                prepared_at_ns=now_ns,
                memory_nodes=memory,
                memory=amounts,
                shares_pool=shares_pool,
            ),
            request,
        )
    records = dict(state.records)
    records[request.uid] = record
    # A new claim's results name the devices its CPUs came from: accounted. A claim confirmed
    # from quarantine has its accounting worked out again.
    new_state = replace(
        state.with_records(
            records,
            pool_changed=True,
            exclusive=state.exclusive | record.cpus,
            unaccounted=state.unaccounted_if_known() if confirmed is None else None,
        ),
        quarantined=quarantined,
    )
    return PrepareOutcome(new_state, record, False, confirmed=confirmed is not None)


def unprepare(state: NodeState, uid: str) -> tuple[NodeState, ClaimRecord | None]:
    """Forget a claim. When its container still runs (the kubelet unprepares after the pod's
    containers stop, so only a stray call does this), its CPUs stay exclusive until that
    container stops: handing them to shared containers would put both on the same CPUs."""
    record = state.records.get(uid)
    if record is None:
        return state, None
    records = dict(state.records)
    del records[uid]
    known = state.unaccounted_if_known()
    unaccounted = known if known is not None and not known & record.cpus else None
    if record.container_id:
        draining = dict(state.draining)
        draining[uid] = record
        kept = replace(
            state.with_records(
                records, pool_changed=False, exclusive=state.exclusive, unaccounted=unaccounted
            ),
            draining=draining,
        )
        return kept, record
    new_state = state.with_records(
        records,
        pool_changed=True,
        exclusive=state.exclusive - record.cpus,
        unaccounted=unaccounted,
    )
    return new_state, record
