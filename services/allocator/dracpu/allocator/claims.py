"""The node's allocation state and the rules that change it, as pure functions.

`NodeState` is immutable: every operation returns a new state, so a mutation can be reserved
in memory, made durable, and only then published (or simply dropped on failure), while readers
keep a consistent snapshot. The exclusive CPUs are the union of all prepared claims; the
shared pool is online - reserved - exclusive (strict reservation: a prepared claim's CPUs leave
the shared pool at prepare time, not when its container starts).

Two rules keep the published devices honest (`withheld`):
- the shared-pool floor: the lowest `min_shared` CPUs of the pool are never published nor
  handed out, so shared containers (the driver's own among them) always have somewhere to run;
- claims the scheduler cannot see on the current devices (prepared under another device mode,
  grouping or reserved set, or rebuilt from a spec or a running container) keep their CPUs
  out of what is published, so no CPU is offered while a claim holds it.

Who may use a claim: a container presents `DRA_CPUSET_<uid>=<cpus>` in its env, which the pod
author controls, so the env only names the claim. A container is accepted only when its pod is
in the claim's namespace and, when the dra-plugin passed the claim's `status.reservedFor`, among
those pods. A claim the allocator has no record of is never created from a container's env: it
is quarantined (no CPUs taken) until a prepare of that claim confirms it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property

from dracpu.allocator import opaque
from dracpu.allocator.devices import CPU_CAPACITY, DRIVER, Device, DeviceModel
from dracpu.allocator.isolation import take_with_isolation
from dracpu.allocator.quantity import cpu_count
from dracpu.core.cpuset import CPUSet
from dracpu.core.errors import (
    ConflictError,
    DracpuError,
    ForbiddenError,
    InsufficientCPUsError,
    InvalidInputError,
    NotFoundError,
)
from dracpu.core.machine import Machine


@dataclass(frozen=True, slots=True)
class Owner:
    """The one container a claim belongs to: a restarted container of the same pod and name
    is the same owner."""

    pod_uid: str
    container_name: str
    pod_namespace: str = ""
    pod_name: str = ""

    @property
    def key(self) -> tuple[str, str]:
        return (self.pod_uid, self.container_name)

    def describe(self) -> str:
        pod = f"{self.pod_namespace}/{self.pod_name}" if self.pod_name else "pod"
        return f"{pod} (uid {self.pod_uid}) container {self.container_name!r}"


@dataclass(frozen=True, slots=True)
class Container:
    container_id: str
    owner: Owner


@dataclass(frozen=True, slots=True)
class Allocation:
    """What one allocation result of a claim received."""

    request: str
    pool: str
    device: str
    cpus: CPUSet
    count: int  # consumed dra.cpu/cpu; 0 for individual devices
    policy: str = ""

    @property
    def key(self) -> tuple[str, str, str, int]:
        return (self.request, self.pool, self.device, self.count)


@dataclass(frozen=True, slots=True)
class ClaimRecord:
    uid: str
    namespace: str
    name: str
    cpus: CPUSet
    allocations: tuple[Allocation, ...]
    prepared_at_ns: int
    owner: Owner | None = None
    container_id: str = ""  # the owner's running container, "" when none is known
    # Rebuilt from a CDI spec or a running container: the allocation results are unknown
    # until the kubelet prepares the claim again.
    recovered: bool = False
    # The claim's status.reservedFor pod UIDs, when the dra-plugin passed them (pods_known);
    # records of an older dra-plugin have none and bind the first container that attaches.
    pods: tuple[str, ...] = ()
    pods_known: bool = False

    @property
    def policy(self) -> str:
        seen: list[str] = []
        for allocation in self.allocations:
            if allocation.policy and allocation.policy not in seen:
                seen.append(allocation.policy)
        return "; ".join(seen)


@dataclass(frozen=True, slots=True)
class ResultInput:
    """One allocation result of the claim, as the dra-plugin passes it on."""

    request: str
    device: str
    pool: str = ""
    driver: str = DRIVER
    consumed: Mapping[str, str] = field(default_factory=dict)
    admin_access: bool = False


@dataclass(frozen=True, slots=True)
class PrepareInput:
    uid: str
    namespace: str
    name: str
    results: tuple[ResultInput, ...]
    configs: tuple[opaque.OpaqueConfig, ...] = ()
    pods: tuple[str, ...] = ()
    pods_known: bool = False


@dataclass(frozen=True)
class NodeState:
    machine: Machine
    devices: DeviceModel
    records: Mapping[str, ClaimRecord] = field(default_factory=dict)
    # Unprepared while their container still runs: out of the records and their files, but
    # their CPUs stay exclusive until that container stops (memory only).
    draining: Mapping[str, ClaimRecord] = field(default_factory=dict)
    # Claims a running container presented that the allocator has no record of: held aside,
    # taking no CPUs, until a prepare of the claim confirms them (memory only).
    quarantined: Mapping[str, ClaimRecord] = field(default_factory=dict)
    pool_generation: int = 1
    claims_generation: int = 1
    # The union of the records' CPUs when the rule that made this state already knows it
    # (records never share a CPU: prepare adds a claim's CPUs, unprepare takes them away), so
    # a mutation costs the same however many claims the node holds.
    known_exclusive: CPUSet | None = field(default=None, compare=False, repr=False)
    # Likewise the CPUs of claims the devices do not account for, when the rule knows them.
    known_unaccounted: CPUSet | None = field(default=None, compare=False, repr=False)

    @property
    def reserved(self) -> CPUSet:
        return self.devices.options.reserved

    @property
    def online(self) -> CPUSet:
        return self.machine.online

    @cached_property
    def exclusive(self) -> CPUSet:
        if self.known_exclusive is not None:
            return self.known_exclusive
        mask = 0
        for record in self.records.values():
            mask |= record.cpus.mask
        for record in self.draining.values():
            mask |= record.cpus.mask
        return CPUSet.from_mask(mask)

    @cached_property
    def free(self) -> CPUSet:
        """CPUs a new claim may take."""
        return self.online - self.reserved - self.exclusive

    @cached_property
    def shared(self) -> CPUSet:
        """Where containers without a claim run: the free CPUs that are not isolated, or all
        free CPUs when every one of them is isolated (a container must run somewhere)."""
        free = self.free
        return (free - self.machine.isolated) or free

    @property
    def shared_on_isolated(self) -> bool:
        return bool(self.shared & self.machine.isolated)

    @property
    def min_shared(self) -> int:
        return self.devices.options.min_shared

    @cached_property
    def floor(self) -> CPUSet:
        """The CPUs kept for the shared pool: its first `min_shared` in device-number order,
        whole cores first and low-numbered ones first, like the kubelet's reserved CPUs (fewer
        only when the pool itself is smaller)."""
        wanted = self.min_shared
        if wanted <= 0:
            return CPUSet()
        shared = self.shared
        kept: list[int] = []
        for cpu in self.devices.order:
            if cpu in shared:
                kept.append(cpu)
                if len(kept) == wanted:
                    break
        return CPUSet(kept)

    @cached_property
    def unaccounted(self) -> CPUSet:
        """CPUs of claims whose allocation results do not name a current device holding them:
        the scheduler would see those CPUs as free."""
        if self.known_unaccounted is not None:
            return self.known_unaccounted
        mask = 0
        for record in self.records.values():
            if not accounted(record, self.devices, self.online):
                mask |= record.cpus.mask
        return CPUSet.from_mask(mask)

    @cached_property
    def withheld(self) -> CPUSet:
        """CPUs left out of the published devices: the floor, claims the devices do not account
        for, and unprepared claims whose container still runs on their CPUs."""
        draining = CPUSet()
        for record in self.draining.values():
            draining = draining | record.cpus
        return self.floor | self.unaccounted | draining

    @cached_property
    def allocatable(self) -> CPUSet:
        """CPUs a new claim may receive: the free CPUs above the shared pool's floor."""
        return self.free - self.floor

    def owner_of(self, cpus: CPUSet) -> ClaimRecord | None:
        for record in (*self.records.values(), *self.draining.values()):
            if record.cpus & cpus:
                return record
        return None

    def with_records(
        self,
        records: Mapping[str, ClaimRecord],
        *,
        pool_changed: bool,
        exclusive: CPUSet | None = None,
        unaccounted: CPUSet | None = None,
    ) -> NodeState:
        """A state with other records. Without `exclusive`, a change that moves no CPU keeps
        this state's union; one that does has it computed again when first asked. Without
        `unaccounted`, it is computed again when first asked."""
        if exclusive is None and not pool_changed:
            exclusive = self.exclusive
        return replace(
            self,
            records=records,
            pool_generation=self.pool_generation + (1 if pool_changed else 0),
            claims_generation=self.claims_generation + 1,
            known_exclusive=exclusive,
            known_unaccounted=unaccounted,
        )

    def unaccounted_if_known(self) -> CPUSet | None:
        """`unaccounted` when already computed, without computing it."""
        known = self.__dict__.get("unaccounted")
        return known if isinstance(known, CPUSet) else self.known_unaccounted


def accounted(record: ClaimRecord, devices: DeviceModel, online: CPUSet | None = None) -> bool:
    """Whether the scheduler sees this claim's CPUs as allocated on `devices`: each result
    names a device of this model that holds the (still online) CPUs it received."""
    if record.recovered or not record.allocations:
        return False
    for allocation in record.allocations:
        device = devices.by_name.get(allocation.device)
        cpus = allocation.cpus & online if online is not None else allocation.cpus
        if device is None or not cpus.issubset(device.cpus):
            return False
        if (allocation.count == 0) != (device.kind == "cpu"):
            return False
    return True


def shortfall(state: NodeState) -> int:
    """How many CPUs the shared pool lacks to reach its minimum (0 when it has enough)."""
    return max(0, state.min_shared - len(state.shared))


@dataclass(frozen=True, slots=True)
class PrepareOutcome:
    state: NodeState
    record: ClaimRecord
    already_prepared: bool
    confirmed: bool = False  # a quarantined claim's CPUs were confirmed by this prepare


def _where(uid: str, result: ResultInput) -> str:
    return f"claim {uid} request {result.request!r} device {result.device!r}"


def _device(state: NodeState, uid: str, result: ResultInput) -> Device:
    device = state.devices.by_name.get(result.device)
    if device is None:
        raise NotFoundError(f"{_where(uid, result)}: no such device on this node")
    return device


def _check_results(request: PrepareInput) -> None:
    if not request.uid:
        raise InvalidInputError("claim uid is empty")
    if not request.results:
        raise InvalidInputError(f"claim {request.uid}: no allocation results for {DRIVER}")
    for result in request.results:
        if result.driver != DRIVER:
            raise InvalidInputError(
                f"{_where(request.uid, result)}: result of driver {result.driver!r}, not {DRIVER}"
            )
        if result.admin_access:
            raise InvalidInputError(
                f"{_where(request.uid, result)}: admin access is not supported for exclusive CPUs"
            )


def _count(uid: str, result: ResultInput) -> int:
    text = result.consumed.get(CPU_CAPACITY)
    if text is None:
        raise InvalidInputError(
            f"{_where(uid, result)}: consumed capacity {CPU_CAPACITY} is missing"
        )
    return cpu_count(text, _where(uid, result))


def _threads_per_core(machine: Machine) -> int:
    return max((len(cpus) for cpus in machine.cores.values()), default=1)


def allocate(state: NodeState, request: PrepareInput) -> tuple[Allocation, ...]:
    """Choose the CPUs for every result of a new claim, or raise the precise error."""
    _check_results(request)
    uid = request.uid
    free = state.allocatable
    assigned = CPUSet()
    allocations: list[Allocation] = []
    mode = state.devices.mode
    group_by = state.devices.group_by
    for result in request.results:
        device = _device(state, uid, result)
        where = _where(uid, result)
        if mode == "individual":
            opaque.refuse_policy(request.configs, result.request, DRIVER)
            cpus, count, policy = device.cpus, 0, ""
            if cpus & assigned:
                raise InvalidInputError(f"{where}: the device appears twice in the claim")
            if not cpus.issubset(free):
                other = state.owner_of(cpus)
                if other is None and cpus & state.floor:
                    raise InsufficientCPUsError(
                        f"{where}: CPU {cpus.format()} is kept for the shared pool "
                        f"(at least {state.min_shared} shared CPUs)"
                    )
                holder = f"claim {other.uid}" if other else "reserved CPUs"
                raise ConflictError(
                    f"{where}: overlapping device assignment: "
                    f"CPU {cpus.format()} is held by {holder}"
                )
        elif group_by == "machine":
            count = _count(uid, result)
            cpus = opaque.explicit_cpuset(request.configs, result.request, DRIVER)
            policy = "explicit"
            _check_explicit(state, where, cpus, count, assigned)
        else:
            count = _count(uid, result)
            chosen = opaque.placement_policy(
                request.configs, result.request, DRIVER, _threads_per_core(state.machine)
            )
            policy = opaque.describe_policy(chosen)
            available = (free & device.cpus) - assigned
            isolation = opaque.isolation_preference(request.configs, result.request, DRIVER)
            if isolation:
                policy = f"{policy}+isolated-{isolation}"
            try:
                cpus = take_with_isolation(state.machine, available, count, chosen, isolation)
            except InsufficientCPUsError as exc:
                raise InsufficientCPUsError(
                    f"{where}: cannot take {count} CPUs ({policy}) from {len(available)} free "
                    f"in the device: {exc}"
                ) from None
            except InvalidInputError as exc:
                raise InvalidInputError(f"{where}: {exc}") from None
            if len(cpus) != count or not cpus.issubset(available):
                # The algorithm's contract; never publish a result that breaks it.
                raise InsufficientCPUsError(f"{where}: placement returned an invalid cpuset")
        assigned = assigned | cpus
        left = len(state.free - assigned)
        if left < state.min_shared:
            # Never reached while the floor is withheld from the devices; kept as the rule's
            # last word so no claim can empty the shared pool.
            raise InsufficientCPUsError(
                f"{where}: would leave {left} shared CPUs, below the minimum of {state.min_shared}"
            )
        allocations.append(
            Allocation(
                request=result.request,
                pool=result.pool,
                device=result.device,
                cpus=cpus,
                count=count,
                policy=policy,
            )
        )
    return tuple(allocations)


def _check_explicit(
    state: NodeState, where: str, cpus: CPUSet, count: int, assigned: CPUSet
) -> None:
    text = cpus.format()
    if len(cpus) != count:
        raise InvalidInputError(
            f"{where}: opaque config cpuset {text} has {len(cpus)} CPUs, "
            f"the request consumed {count}"
        )
    offline = cpus - state.online
    if offline:
        raise InvalidInputError(
            f"{where}: opaque config cpuset {text} has offline CPUs {offline.format()}"
        )
    reserved = cpus & state.reserved
    if reserved:
        raise InvalidInputError(
            f"{where}: opaque config cpuset {text} has reserved CPUs {reserved.format()}"
        )
    if cpus & assigned:
        raise InvalidInputError(
            f"{where}: opaque config cpuset {text} overlaps another result of the same claim"
        )
    taken = cpus & state.exclusive
    if taken:
        other = state.owner_of(taken)
        holder = f"claim {other.uid}" if other else "another claim"
        raise ConflictError(
            f"{where}: opaque config cpuset {text}: CPUs {taken.format()} are held by {holder}"
        )
    kept = cpus & state.floor
    if kept:
        raise InsufficientCPUsError(
            f"{where}: opaque config cpuset {text}: CPUs {kept.format()} are kept for the "
            f"shared pool (at least {state.min_shared} shared CPUs)"
        )


def _result_keys(request: PrepareInput, state: NodeState) -> tuple[tuple[str, str, str, int], ...]:
    keys = []
    for result in request.results:
        count = 0
        if state.devices.mode == "grouped":
            count = _count(request.uid, result)
        keys.append((result.request, result.pool, result.device, count))
    return tuple(keys)


def _complete_recovered(
    state: NodeState, record: ClaimRecord, request: PrepareInput
) -> ClaimRecord:
    """A record rebuilt from a CDI spec or a container meets its allocation results again:
    accept them when they account for exactly the recorded CPUs."""
    _check_results(request)
    remaining = record.cpus
    allocations = []
    for result in request.results:
        device = _device(state, request.uid, result)
        where = _where(request.uid, result)
        if state.devices.mode == "individual":
            cpus, count = device.cpus, 0
            if not cpus.issubset(remaining):
                raise ConflictError(
                    f"{where}: the claim was prepared earlier with CPUs {record.cpus.format()}"
                )
        else:
            count = _count(request.uid, result)
            candidates = (remaining & device.cpus).sorted()
            if len(candidates) < count:
                raise ConflictError(
                    f"{where}: the claim was prepared earlier with CPUs {record.cpus.format()}, "
                    f"which do not hold {count} CPUs of this device"
                )
            cpus = CPUSet(candidates[:count])
        remaining = remaining - cpus
        allocations.append(
            Allocation(result.request, result.pool, result.device, cpus, count, "recovered")
        )
    if remaining:
        raise ConflictError(
            f"claim {request.uid}: prepared earlier with CPUs {record.cpus.format()}; "
            f"the results do not account for {remaining.format()}"
        )
    return replace(
        record,
        namespace=request.namespace or record.namespace,
        name=request.name or record.name,
        allocations=tuple(allocations),
        recovered=False,
    )


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
    if record.owner is not None and _forbidden(record.uid, record, record.owner) is not None:
        return replace(record, owner=None, container_id="")
    return record


def _confirm_quarantined(
    state: NodeState, held: ClaimRecord, request: PrepareInput
) -> ClaimRecord | None:
    """A prepare of a quarantined claim: the running container's CPUs become the claim's when
    they are still free and account exactly for the allocation results; None otherwise."""
    if not held.cpus.issubset(state.shared):
        return None
    try:
        record = _complete_recovered(state, held, request)
    except DracpuError:
        return None
    return _keep_allowed_owner(_with_pods(record, request))


def prepare(state: NodeState, request: PrepareInput, now_ns: int) -> PrepareOutcome:
    """Prepare a claim; the same request again gives the recorded answer."""
    existing = state.records.get(request.uid)
    if existing is not None:
        if existing.recovered:
            record = _keep_allowed_owner(
                _with_pods(_complete_recovered(state, existing, request), request)
            )
            records = dict(state.records)
            records[request.uid] = record
            return PrepareOutcome(state.with_records(records, pool_changed=False), record, True)
        _check_results(request)
        if _result_keys(request, state) != tuple(a.key for a in existing.allocations):
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
    leaving = state.draining.get(request.uid)
    if leaving is not None:
        raise ConflictError(
            f"claim {request.uid} was unprepared while container {leaving.container_id} still "
            f"runs on CPUs {leaving.cpus.format()}; it can be prepared again once that stops"
        )
    quarantined = dict(state.quarantined)
    held = quarantined.pop(request.uid, None)
    confirmed = _confirm_quarantined(state, held, request) if held is not None else None
    if confirmed is not None:
        record = replace(confirmed, prepared_at_ns=now_ns)
    else:
        allocations = allocate(state, request)
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


def parse_claim_cpus(claims: Mapping[str, str]) -> dict[str, CPUSet]:
    parsed = {}
    for uid, text in claims.items():
        try:
            parsed[uid] = CPUSet.parse(text)
        except InvalidInputError as exc:
            raise InvalidInputError(f"claim {uid}: presented cpuset: {exc}") from None
    return parsed


def _forbidden(uid: str, record: ClaimRecord, owner: Owner) -> ForbiddenError | None:
    """Whether the claim's namespace and reservedFor pods allow this container's pod."""
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


def _owner_conflict(uid: str, record: ClaimRecord, owner: Owner) -> DracpuError | None:
    forbidden = _forbidden(uid, record, owner)
    if forbidden is not None:
        return forbidden
    if record.owner is None or record.owner.key == owner.key:
        return None
    return ConflictError(
        f"claim {uid} belongs to {record.owner.describe()}; it cannot also be used by "
        f"{owner.describe()}"
    )


@dataclass(frozen=True, slots=True)
class AttachOutcome:
    state: NodeState
    cpus: CPUSet
    newly_bound: bool
    changed: bool  # something durable changed (owner or running container)


def attach(state: NodeState, container: Container, claims: Mapping[str, CPUSet]) -> AttachOutcome:
    """Bind a container to its claims: all or nothing."""
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
        conflict = _owner_conflict(uid, record, container.owner)
        if conflict is not None:
            raise conflict
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
    return AttachOutcome(new_state, union, newly, changed)


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
        if record is None:
            problem = ""
            if uid in state.draining:
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
        conflict = _owner_conflict(uid, record, container.owner)
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
    return AdoptOutcome(new_state, tuple(results), union, (), changed)


def retopologize(state: NodeState, machine: Machine, devices: DeviceModel) -> NodeState:
    """The inventory or configuration changed: records keep their CPUs (a claim is never
    silently dropped); the shared pool follows the new online set."""
    pool_changed = (
        machine.online != state.online
        or devices.options.reserved != state.reserved
        or machine.isolated != state.machine.isolated
    )
    return replace(
        state,
        machine=machine,
        devices=devices,
        pool_generation=state.pool_generation + (1 if pool_changed else 0),
        known_unaccounted=None,
    )


@dataclass(frozen=True, slots=True)
class Summary:
    allocated: int
    available: int
    reserved: int
    active_claims: int
    online: int


def summary(state: NodeState) -> Summary:
    return Summary(
        allocated=len(state.exclusive),
        available=len(state.free),
        reserved=len(state.reserved & state.online),
        active_claims=len(state.records),
        online=len(state.online),
    )


def list_claims(state: NodeState, namespace: str = "") -> list[ClaimRecord]:
    return sorted(
        (r for r in state.records.values() if not namespace or r.namespace == namespace),
        key=lambda r: (r.namespace, r.name, r.uid),
    )


def offline_claims(state: NodeState) -> Sequence[tuple[ClaimRecord, CPUSet]]:
    """Records holding CPUs the kernel no longer reports online."""
    return [(r, r.cpus - state.online) for r in state.records.values() if r.cpus - state.online]
