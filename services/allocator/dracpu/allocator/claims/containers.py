"""Running containers and their claims: `attach` (a container starts), `detach` (it stopped),
`adopt` (a running container reported during recovery) and which containers a state holds."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from dracpu.allocator.claims.model import ClaimRecord
from dracpu.allocator.claims.ownership import owner_conflict
from dracpu.allocator.claims.state import NodeState
from dracpu.core.containers import Container
from dracpu.core.cpuset import CPUSet
from dracpu.core.errors import ConflictError, InvalidInputError, NotFoundError


def parse_claim_cpus(claims: Mapping[str, str]) -> dict[str, CPUSet]:
    parsed = {}
    for uid, text in claims.items():
        try:
            parsed[uid] = CPUSet.parse(text)
        except InvalidInputError as exc:
            raise InvalidInputError(f"claim {uid}: presented cpuset: {exc}") from None
    return parsed


def container_memory_nodes(state: NodeState, held: Iterable[ClaimRecord]) -> CPUSet:
    """The memory nodes of a container holding these claims: none (every node) unless one of
    them is placed; then the union of the placed claims' nodes and the NUMA nodes of the other
    claims' CPUs, so no CPU of the container is kept off its own node's memory."""
    records = list(held)
    if not any(r.memory_nodes for r in records):
        return CPUSet()
    nodes = CPUSet()
    for record in records:
        nodes = nodes | (record.memory_nodes or state.machine.numa_nodes_of(record.cpus))
    return nodes


@dataclass(frozen=True, slots=True)
class AttachOutcome:
    state: NodeState
    cpus: CPUSet
    newly_bound: bool
    changed: bool  # something durable changed (owner or running container)
    memory_nodes: CPUSet = field(default_factory=CPUSet)  # empty: every node
    # Page size as the kubelet names it (2Mi, 1Gi) -> the bytes of hugepages its claims hold.
    hugepage_limits: Mapping[str, int] = field(default_factory=dict)
    # Its claims whose container runs on the shared pool too, ascending.
    shared_pool_claims: tuple[str, ...] = ()


def hugepage_limits(records: Iterable[ClaimRecord]) -> dict[str, int]:
    """The hugepages the claims hold, per page size, whatever NUMA node they lie on: the
    container's hugetlb limits."""
    limits: dict[str, int] = {}
    for record in records:
        for amount in record.memory:
            size = amount.kind.removeprefix("hugepages-")
            if size != amount.kind and amount.bytes:
                limits[size] = limits.get(size, 0) + amount.bytes
    return limits


def attach(
    state: NodeState,
    container: Container,
    claims: Mapping[str, CPUSet],
    enforces_memory: bool = False,
) -> AttachOutcome:
    """Bind a container to its claims: all or nothing. A claim holding memory is refused to a
    plugin that does not say it enforces memory (`enforces_memory`, an older nri-plugin): its
    container would run with neither its memory nodes nor its hugepage limits."""
    if not claims:
        raise InvalidInputError("attach: the container presents no claims")
    if not container.container_id:
        raise InvalidInputError("attach: container id is empty")
    for uid, cpus in claims.items():
        record = state.records.get(uid)
        if record is None:
            raise NotFoundError(f"claim {uid} is not prepared on this node")
        if record.cpus != cpus:
            raise ConflictError(
                f"claim {uid}: the container presents CPUs {cpus.format() or '(none)'}, "
                f"the claim was prepared with {record.cpus.format()}"
            )
        conflict = owner_conflict(uid, record, container.owner)
        if conflict is not None:
            raise conflict
        if record.memory and not enforces_memory:
            raise ConflictError(
                f"claim {uid} holds NUMA node memory, which this nri-plugin does not enforce; "
                "upgrade the nri-plugin"
            )
    records = dict(state.records)
    union = CPUSet()
    newly = changed = False
    for uid in sorted(claims):
        record = records[uid]
        union = union | record.cpus
        newly = newly or record.owner is None
        updated = replace(record, owner=container.owner, container_id=container.container_id)
        if updated != record:
            changed = True
            records[uid] = updated
    new_state = (
        state.with_records(records, pool_changed=False, unaccounted=state.unaccounted_if_known())
        if changed
        else state
    )
    memory = container_memory_nodes(state, (records[uid] for uid in claims))
    limits = hugepage_limits(records[uid] for uid in claims)
    sharing = tuple(uid for uid in sorted(claims) if records[uid].shares_pool)
    return AttachOutcome(new_state, union, newly, changed, memory, limits, sharing)


def detach(state: NodeState, container_id: str) -> tuple[NodeState, list[str]]:
    """The container stopped: forget it as running; its claims keep their owner, so a
    restarted container of the same pod and name gets the same CPUs."""
    if not container_id:
        return state, []
    uids = sorted(uid for uid, r in state.records.items() if r.container_id == container_id)
    released = {u: r for u, r in state.draining.items() if r.container_id == container_id}
    held = [u for u, r in state.quarantined.items() if r.container_id == container_id]
    if not uids and not released and not held:
        return state, []
    records = dict(state.records)
    for uid in uids:
        records[uid] = replace(records[uid], container_id="")
    freed = CPUSet()
    for record in released.values():
        freed = freed | record.cpus
    new_state = state.with_records(
        records,
        pool_changed=bool(freed),
        exclusive=state.exclusive - freed,
        unaccounted=state.unaccounted_if_known(),
    )
    return (
        replace(
            new_state,
            draining={u: r for u, r in state.draining.items() if u not in released},
            quarantined={u: r for u, r in state.quarantined.items() if u not in held},
        ),
        sorted([*uids, *released]),
    )


def running_containers(state: NodeState) -> set[str]:
    """Every container this state holds as running: owners of prepared claims, containers of
    unprepared claims still draining, and containers holding quarantined claims."""
    return {
        record.container_id
        for group in (state.records, state.draining, state.quarantined)
        for record in group.values()
        if record.container_id
    }


# Quarantined claims live in memory only; a runtime reporting more is refused beyond this.
MAX_QUARANTINED = 1024


@dataclass(frozen=True, slots=True)
class AdoptResult:
    uid: str
    accepted: bool
    recovered: bool
    error: str = ""
    quarantined: bool = False


@dataclass(frozen=True, slots=True)
class AdoptOutcome:
    state: NodeState
    results: tuple[AdoptResult, ...]
    cpus: CPUSet
    recovered: tuple[str, ...]  # uids of records rebuilt from this report (always empty now)
    changed: bool  # something durable changed
    memory_nodes: CPUSet = field(default_factory=CPUSet)  # of the accepted claims
    shared_pool_claims: tuple[str, ...] = ()  # of the accepted claims, as AttachOutcome's


def adopt(
    state: NodeState, container: Container, claims: Mapping[str, CPUSet], now_ns: int
) -> AdoptOutcome:
    """A running container's claims, reported during recovery: bind the known ones its pod
    may use, quarantine unknown ones (the env alone never makes a claim: a prepare of the claim
    must confirm it), report the rest."""
    records = dict(state.records)
    quarantined = dict(state.quarantined)
    results = []
    union = CPUSet()
    changed = False
    for uid in sorted(claims):
        cpus = claims[uid]
        record = records.get(uid)
        leaving = state.draining.get(uid)
        if record is None and leaving is not None and _still_its(leaving, container, cpus):
            # Unprepared while this very container ran: its CPUs are kept out of the pool
            # for it until it stops, so it keeps running on them (and its stop, reported as
            # for any claimed container, gives them back).
            union = union | cpus
            results.append(AdoptResult(uid, True, False))
            continue
        if record is None:
            problem = ""
            if leaving is not None:
                problem = "it was unprepared"
            elif not cpus:
                problem = "the container presents an empty cpuset"
            elif cpus - state.online:
                problem = f"CPUs {(cpus - state.online).format()} are not online"
            elif cpus & state.reserved:
                problem = f"CPUs {(cpus & state.reserved).format()} are reserved"
            elif len(quarantined) >= MAX_QUARANTINED and uid not in quarantined:
                problem = f"{MAX_QUARANTINED} claims are quarantined already"
            if problem:
                results.append(
                    AdoptResult(uid, False, False, f"claim {uid} cannot be recovered: {problem}")
                )
                continue
            quarantined[uid] = ClaimRecord(
                uid=uid,
                namespace=container.owner.pod_namespace,
                name="",
                cpus=cpus,
                allocations=(),
                prepared_at_ns=now_ns,
                owner=container.owner,
                container_id=container.container_id,
                recovered=True,
            )
            results.append(
                AdoptResult(
                    uid,
                    False,
                    False,
                    f"claim {uid} is not prepared on this node; quarantined until a prepare "
                    f"of the claim confirms CPUs {cpus.format()}",
                    quarantined=True,
                )
            )
            continue
        if record.cpus != cpus:
            results.append(
                AdoptResult(
                    uid,
                    False,
                    False,
                    f"claim {uid}: the container runs on CPUs {cpus.format()}, the claim was "
                    f"prepared with {record.cpus.format()}",
                )
            )
            continue
        conflict = owner_conflict(uid, record, container.owner)
        if conflict is not None:
            results.append(AdoptResult(uid, False, False, str(conflict)))
            continue
        updated = replace(record, owner=container.owner, container_id=container.container_id)
        if updated != record:
            records[uid] = updated
            changed = True
        union = union | cpus
        results.append(AdoptResult(uid, True, False))
    new_state = state.with_records(records, pool_changed=False) if changed else state
    if quarantined != state.quarantined:
        new_state = replace(new_state, quarantined=quarantined)
    accepted = [records.get(r.uid) or state.draining[r.uid] for r in results if r.accepted]
    memory = container_memory_nodes(state, accepted)
    sharing = tuple(r.uid for r in accepted if r.shares_pool)
    return AdoptOutcome(new_state, tuple(results), union, (), changed, memory, sharing)


def _still_its(leaving: ClaimRecord, container: Container, cpus: CPUSet) -> bool:
    """An unprepared claim's record still held for `container`, on the CPUs it presents."""
    return (
        leaving.container_id == container.container_id
        and leaving.cpus == cpus
        and owner_conflict(leaving.uid, leaving, container.owner) is None
    )
