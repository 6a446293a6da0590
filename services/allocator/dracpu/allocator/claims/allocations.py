"""The allocations of a claim's results: the CPUs chosen for a new claim (`allocate`), or, for
a claim rebuilt from a CDI spec or a running container, the recorded CPUs matched to its results
again (`complete_recovered`)."""

from __future__ import annotations

from dataclasses import replace

from dracpu.allocator.claims.model import Allocation, ClaimRecord, PrepareInput, ResultInput
from dracpu.allocator.claims.state import NodeState
from dracpu.allocator.domain import opaque
from dracpu.allocator.domain.devices import CPU_CAPACITY, Device, group_span
from dracpu.allocator.domain.isolation import take_with_isolation
from dracpu.allocator.domain.quantity import cpu_count
from dracpu.core.cpuset import CPUSet
from dracpu.core.driver import DRIVER_NAME
from dracpu.core.errors import (
    ConflictError,
    InsufficientCPUsError,
    InvalidInputError,
    NotFoundError,
)
from dracpu.core.machine import Machine


def _where(uid: str, result: ResultInput) -> str:
    return f"claim {uid} request {result.request!r} device {result.device!r}"


def _device(state: NodeState, uid: str, result: ResultInput) -> Device:
    device = state.devices.by_name.get(result.device)
    if device is None:
        raise NotFoundError(f"{_where(uid, result)}: no such device on this node")
    return device


def check_results(request: PrepareInput) -> None:
    """A prepare names a claim and has results, every one of this driver and without admin
    access."""
    if not request.uid:
        raise InvalidInputError("claim uid is empty")
    if not request.results:
        raise InvalidInputError(f"claim {request.uid}: no allocation results for {DRIVER_NAME}")
    for result in request.results:
        if result.driver != DRIVER_NAME:
            raise InvalidInputError(
                f"{_where(request.uid, result)}: result of driver {result.driver!r}, "
                f"not {DRIVER_NAME}"
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
    check_results(request)
    uid = request.uid
    free = state.allocatable
    assigned = CPUSet()
    allocations: list[Allocation] = []
    mode = state.devices.mode
    external = state.devices.external
    for result in request.results:
        device = _device(state, uid, result)
        where = _where(uid, result)
        if mode == "individual":
            opaque.refuse_policy(request.configs, result.request, DRIVER_NAME)
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
        elif external:
            count = _count(uid, result)
            cpus = opaque.explicit_cpuset(request.configs, result.request, DRIVER_NAME)
            policy = "explicit"
            _check_explicit(state, where, device, cpus, count, assigned)
        else:
            count = _count(uid, result)
            chosen = opaque.placement_policy(
                request.configs, result.request, DRIVER_NAME, _threads_per_core(state.machine)
            )
            policy = opaque.describe_policy(chosen)
            available = (free & device.cpus) - assigned
            isolation = opaque.isolation_preference(request.configs, result.request, DRIVER_NAME)
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


def memory_nodes(
    state: NodeState, request: PrepareInput, allocations: tuple[Allocation, ...]
) -> CPUSet:
    """The claim's memory nodes: when any of its results asks for `local` memory placement
    (its config, else the driver's default), the NUMA nodes of all the claim's CPUs, so every
    CPU the container runs on keeps its own node's memory; otherwise none (every node)."""
    default = state.devices.options.memory_placement
    local = any(
        opaque.memory_placement(request.configs, a.request, DRIVER_NAME, default) == "local"
        for a in allocations
    )
    if not local:
        return CPUSet()
    cpus = CPUSet()
    for allocation in allocations:
        cpus = cpus | allocation.cpus
    return state.machine.numa_nodes_of(cpus)


def _check_explicit(
    state: NodeState, where: str, device: Device, cpus: CPUSet, count: int, assigned: CPUSet
) -> None:
    """An external allocator's cpuset, checked before it is enforced: the error names the
    first rule it breaks."""
    text = cpus.format()
    if len(cpus) != count:
        raise InvalidInputError(
            f"{where}: opaque config cpuset {text} has {len(cpus)} CPUs, "
            f"the request consumed {count}"
        )
    offline = cpus - state.online
    outside = cpus - group_span(state.machine, device)
    # What the device publishes as its dra.cpu/cpuIDs now.
    offered = (device.cpus - state.withheld).format()
    if outside:
        gone = f", offline CPUs {offline.format()}" if offline else ""
        raise InvalidInputError(
            f"{where}: opaque config cpuset {text} has CPUs {outside.format()} outside the "
            f"device's {device.kind} (CPUs {offered}){gone}"
        )
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
    withheld = cpus & state.withheld
    if withheld:
        # Left out of the published devices for another reason (the rules above cover them).
        raise ConflictError(
            f"{where}: opaque config cpuset {text}: CPUs {withheld.format()} are not "
            f"allocatable on device {device.name} now (CPUs {offered})"
        )


def result_keys(request: PrepareInput, state: NodeState) -> tuple[tuple[str, str, str, int], ...]:
    """The request's results as `Allocation.key`s, to compare with what a record holds."""
    keys = []
    for result in request.results:
        count = 0
        if state.devices.mode == "grouped":
            count = _count(request.uid, result)
        keys.append((result.request, result.pool, result.device, count))
    return tuple(keys)


def complete_recovered(state: NodeState, record: ClaimRecord, request: PrepareInput) -> ClaimRecord:
    """A record rebuilt from a CDI spec or a container meets its allocation results again:
    accept them when they account for exactly the recorded CPUs."""
    check_results(request)
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
        memory_nodes=memory_nodes(state, request, tuple(allocations)),
    )
