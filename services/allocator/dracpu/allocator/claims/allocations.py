"""The allocations of a claim's results: the CPUs chosen for a new claim (`allocate`), or, for
a claim rebuilt from a CDI spec or a running container, the recorded CPUs matched to its results
again (`complete_recovered`). Both read the claim's opaque configuration as it was parsed when
the claim arrived (`dracpu.allocator.domain.opaque.ClaimConfig`)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from dracpu.allocator.claims import rules
from dracpu.allocator.claims.memory import claim_memory
from dracpu.allocator.claims.model import (
    Allocation,
    ClaimRecord,
    MemoryAmount,
    PrepareInput,
    ResultInput,
)
from dracpu.allocator.claims.state import NodeState
from dracpu.allocator.domain import opaque
from dracpu.allocator.domain.devices import Device, group_span
from dracpu.allocator.domain.isolation import take_with_isolation
from dracpu.core.config import MemoryPlacement
from dracpu.core.cpuset import CPUSet
from dracpu.core.driver import CPU_CAPACITY, DRIVER_NAME, MEMORY_DEVICE_PREFIX
from dracpu.core.errors import (
    ConflictError,
    InsufficientCPUsError,
    InvalidInputError,
    NotFoundError,
)
from dracpu.core.machine import Machine
from dracpu.core.quantity import cpu_count


def _where(uid: str, result: ResultInput) -> str:
    return f"claim {uid} request {result.request!r} device {result.device!r}"


def _device(state: NodeState, uid: str, result: ResultInput) -> Device:
    device = state.devices.by_name.get(result.device)
    if device is None:
        raise NotFoundError(f"{_where(uid, result)}: no such device on this node")
    return device


def check_results(request: PrepareInput) -> None:
    """A prepare names a claim and has results, every one of this driver, without admin access,
    and at least one of a CPU device: a memory device is claimed beside CPUs, since the
    container finds its claim, and with it its memory placement, through the claim's CPUs."""
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
    if all(_names_memory(result) for result in request.results):
        raise InvalidInputError(
            f"claim {request.uid}: memory devices are claimed together with CPUs; "
            "add a request for CPUs to the claim"
        )


def _names_memory(result: ResultInput) -> bool:
    return result.device.startswith(MEMORY_DEVICE_PREFIX)


def _memory(state: NodeState, request: PrepareInput) -> tuple[tuple[MemoryAmount, ...], CPUSet]:
    """The memory the claim's memory results take, checked against what is free, and its NUMA
    nodes; a claim of CPUs alone never reads the memory rules."""
    if not any(_names_memory(result) for result in request.results):
        return (), CPUSet()
    return claim_memory(state, request)


def _count(uid: str, result: ResultInput) -> int:
    text = result.consumed.get(CPU_CAPACITY)
    if text is None:
        raise InvalidInputError(
            f"{_where(uid, result)}: consumed capacity {CPU_CAPACITY} is missing"
        )
    return cpu_count(text, _where(uid, result))


def _threads_per_core(machine: Machine) -> int:
    return max((len(cpus) for cpus in machine.cores.values()), default=1)


@dataclass(frozen=True, slots=True)
class _Node:
    """What choosing a new claim's CPUs reads of the node, read once, before the first
    result."""

    state: NodeState
    allocatable: CPUSet  # what a new claim may receive
    free: CPUSet  # what the shared pool would keep but for this claim
    min_shared: int
    chooser: opaque.Chooser
    threads_per_core: int  # for the driver's placement only
    memory_default: MemoryPlacement


def _node(state: NodeState) -> _Node:
    options = state.devices.options
    chooser: opaque.Chooser
    if options.mode == "individual":
        chooser = "scheduler"
    elif options.allocator == "external":
        chooser = "claim"
    else:
        chooser = "driver"
    return _Node(
        state=state,
        allocatable=state.allocatable,
        free=state.free,
        min_shared=options.min_shared,
        chooser=chooser,
        threads_per_core=_threads_per_core(state.machine) if chooser == "driver" else 1,
        memory_default=options.memory_placement,
    )


def _scheduler_cpus(node: _Node, where: str, device: Device, assigned: CPUSet) -> CPUSet:
    """Individual mode: the device's CPU, when it is still the claim's to take."""
    cpus = device.cpus
    if cpus & assigned:
        raise InvalidInputError(f"{where}: the device appears twice in the claim")
    if not cpus.issubset(node.allocatable):
        state = node.state
        other = state.owner_of(cpus)
        if other is None and cpus & state.floor:
            raise InsufficientCPUsError(
                f"{where}: CPU {cpus.format()} is kept for the shared pool "
                f"(at least {node.min_shared} shared CPUs)"
            )
        holder = f"claim {other.uid}" if other else "reserved CPUs"
        raise ConflictError(
            f"{where}: overlapping device assignment: CPU {cpus.format()} is held by {holder}"
        )
    return cpus


def _driver_cpus(
    node: _Node,
    where: str,
    device: Device,
    count: int,
    wanted: rules.RequestConfig,
    assigned: CPUSet,
) -> CPUSet:
    """allocator cpumanager: `count` CPUs of the device placed by the claim's policy."""
    available = (node.allocatable & device.cpus) - assigned
    machine = node.state.machine
    try:
        cpus = take_with_isolation(machine, available, count, wanted.policy, wanted.isolation)
    except InsufficientCPUsError as exc:
        raise InsufficientCPUsError(
            f"{where}: cannot take {count} CPUs ({wanted.described}) from {len(available)} free "
            f"in the device: {exc}"
        ) from None
    except InvalidInputError as exc:
        raise InvalidInputError(f"{where}: {exc}") from None
    if len(cpus) != count or not cpus.issubset(available):
        # The algorithm's contract; never publish a result that breaks it.
        raise InsufficientCPUsError(f"{where}: placement returned an invalid cpuset")
    return cpus


def allocate(
    state: NodeState, request: PrepareInput, config: opaque.ClaimConfig
) -> tuple[tuple[Allocation, ...], CPUSet, tuple[MemoryAmount, ...], bool]:
    """Choose the CPUs for every CPU result of a new claim, in order, with the claim's memory
    nodes, the memory its memory results take and whether its container runs on the shared
    pool too (some result's `sharedPool: include`); or raise the precise error. The node's facts
    are read once, and each result's configuration is asked for once (`config`, parsed when the
    claim arrived)."""
    check_results(request)
    amounts, claimed_nodes = _memory(state, request)
    uid = request.uid
    node = _node(state)
    assigned = CPUSet()
    allocations: list[Allocation] = []
    local = shares_pool = False
    for result in request.results:
        if _names_memory(result):
            continue
        device = _device(state, uid, result)
        where = _where(uid, result)
        count = 0 if node.chooser == "scheduler" else _count(uid, result)
        wanted = rules.request_config(
            config, result.request, node.chooser, node.threads_per_core, node.memory_default
        )
        if node.chooser == "scheduler":
            cpus = _scheduler_cpus(node, where, device, assigned)
        elif wanted.cpuset is not None:  # the claim's own CPUs (allocator external)
            cpus = wanted.cpuset
            _check_explicit(state, where, device, cpus, count, assigned)
        else:
            cpus = _driver_cpus(node, where, device, count, wanted, assigned)
        assigned = assigned | cpus
        left = len(node.free - assigned)
        if left < node.min_shared:
            # Never reached while the floor is withheld from the devices; kept as the rule's
            # last word so no claim can empty the shared pool.
            raise InsufficientCPUsError(
                f"{where}: would leave {left} shared CPUs, below the minimum of {node.min_shared}"
            )
        allocations.append(
            Allocation(
                request=result.request,
                pool=result.pool,
                device=result.device,
                cpus=cpus,
                count=count,
                policy=wanted.described,
            )
        )
        local = local or wanted.memory == "local"
        shares_pool = shares_pool or wanted.shared_pool
    # When any result asks for `local` memory, the NUMA nodes of all the claim's CPUs, so
    # every CPU the container runs on keeps its own node's memory; with the nodes its memory
    # devices gave; otherwise none (every node).
    memory = state.machine.numa_nodes_of(assigned) if local else CPUSet()
    return tuple(allocations), memory | claimed_nodes, amounts, shares_pool


def memory_nodes(
    state: NodeState,
    config: opaque.ClaimConfig,
    allocations: tuple[Allocation, ...],
    claimed: CPUSet | None = None,
) -> CPUSet:
    """The claim's memory nodes: when any of its results asks for `local` memory placement
    (its config, else the driver's default), the NUMA nodes of all the claim's CPUs, so every
    CPU the container runs on keeps its own node's memory; with the nodes its memory devices
    gave (`claimed`); otherwise none (every node)."""
    default = state.devices.options.memory_placement
    local = any(rules.memory_placement(config, a.request, default) == "local" for a in allocations)
    if not local:
        return claimed or CPUSet()
    cpus = CPUSet()
    for allocation in allocations:
        cpus = cpus | allocation.cpus
    return state.machine.numa_nodes_of(cpus) | (claimed or CPUSet())


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
    # What the device publishes as its CPU list attribute now.
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
        if _names_memory(result):
            continue  # compared as the record's memory
        count = 0
        if state.devices.mode == "grouped":
            count = _count(request.uid, result)
        keys.append((result.request, result.pool, result.device, count))
    return tuple(keys)


def complete_recovered(
    state: NodeState, record: ClaimRecord, request: PrepareInput, config: opaque.ClaimConfig
) -> ClaimRecord:
    """A record rebuilt from a CDI spec or a container meets its allocation results again:
    accept them when they account for exactly the recorded CPUs, and their memory when the
    node still has it free."""
    check_results(request)
    amounts, claimed_nodes = _memory(state, request)
    remaining = record.cpus
    allocations = []
    for result in request.results:
        if _names_memory(result):
            continue
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
        memory_nodes=memory_nodes(state, config, tuple(allocations), claimed_nodes),
        memory=amounts,
        shares_pool=rules.shared_pool(config, (a.request for a in allocations)),
    )
