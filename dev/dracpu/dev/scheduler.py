"""What the Kubernetes scheduler would allocate for a CPU claim, from the published
ResourceSlices and the allocations already recorded in other claims. Pure: no I/O.

Grouped devices (`allowMultipleAllocations` with the CPU capacity) are shared: a claim
takes one device with enough capacity left and records `consumedCapacity`. Individual devices
stand for one CPU each and go to one claim only. Like the scheduler, the first fit in pool and
device-name order wins.

A claim may also ask for memory (publishMemoryDevices): a second request of the memory
DeviceClass with capacity requests, constrained to the NUMA node of its CPUs (`matchAttribute`
resource.kubernetes.io/numaNode). It takes the `memory-node-<N>` device of the first node
where both the CPUs and every amount fit, and records the amounts as its `consumedCapacity`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from dracpu.core.cpuset import CPUSet
from dracpu.core.driver import (
    ATTR_CPU_IDS,
    ATTR_LEGACY_NUMA_NODE_ID,
    ATTR_NUMA_NODE,
    CPU_CAPACITY,
    DRIVER_NAME,
    MEMORY_CAPACITY,
)
from dracpu.core.errors import InsufficientCPUsError, InsufficientMemoryError, InvalidInputError
from dracpu.core.memory import binary_quantity
from dracpu.core.quantity import byte_count, whole_quantity

# Where a device says its NUMA node, the current attribute first.
NUMA_ATTRIBUTES = (ATTR_NUMA_NODE, ATTR_LEGACY_NUMA_NODE_ID)


@dataclass(frozen=True)
class Device:
    pool: str
    name: str
    node: str
    numa: int | None
    capacity: int | None  # the CPU capacity of a grouped device; None for an individual CPU
    cpu_ids: CPUSet | None = None  # the CPU list attribute (allocator external), else None

    @property
    def key(self) -> tuple[str, str]:
        return (self.pool, self.name)


@dataclass(frozen=True)
class MemoryDevice:
    """A memory device (`memory-node-<N>`): its capacities in bytes, by capacity name."""

    pool: str
    name: str
    node: str
    numa: int | None
    capacity: tuple[tuple[str, int], ...]

    @property
    def key(self) -> tuple[str, str]:
        return (self.pool, self.name)


@dataclass(frozen=True)
class Result:
    """One entry of status.allocation.devices.results: `consumed` CPUs of a grouped CPU
    device, or `memory` bytes per capacity of a memory device."""

    request: str
    pool: str
    device: str
    consumed: int | None
    memory: tuple[tuple[str, int], ...] = ()

    def to_document(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "request": self.request,
            "driver": DRIVER_NAME,
            "pool": self.pool,
            "device": self.device,
        }
        if self.consumed is not None:
            document["consumedCapacity"] = {CPU_CAPACITY: str(self.consumed)}
        if self.memory:
            document["consumedCapacity"] = {
                name: binary_quantity(amount) for name, amount in self.memory
            }
        return document


def _quantity(value: object, where: str) -> int:
    """A CPU count written as a quantity (`4`, `4000m`; a YAML number too)."""
    try:
        count = whole_quantity(str(value), where)
    except InvalidInputError:
        count = -1
    if count < 0:
        raise InvalidInputError(f"{where}: {CPU_CAPACITY} quantity {value!r} is not a CPU count")
    return count


def _numa(attributes: Mapping[str, Any]) -> int | None:
    for name in NUMA_ATTRIBUTES:
        value = attributes.get(name)
        if isinstance(value, Mapping) and isinstance(value.get("int"), int):
            return int(value["int"])
    return None


def _published(
    slices: Iterable[Mapping[str, Any]],
) -> Iterable[tuple[str, str, Mapping[str, Any]]]:
    """(pool, node name, device) of our driver's devices in the newest generation of each
    pool."""
    ours = [s for s in slices if (s.get("spec") or {}).get("driver") == DRIVER_NAME]
    newest: dict[str, int] = {}
    for item in ours:
        pool = item["spec"].get("pool") or {}
        name = str(pool.get("name", ""))
        newest[name] = max(newest.get(name, 0), int(pool.get("generation", 0)))
    for item in ours:
        spec = item["spec"]
        pool = spec.get("pool") or {}
        name = str(pool.get("name", ""))
        if int(pool.get("generation", 0)) != newest[name]:
            continue
        for device in spec.get("devices") or []:
            yield name, str(spec.get("nodeName", "")), device


def devices_of(slices: Iterable[Mapping[str, Any]]) -> list[Device]:
    """The CPU devices of our driver in the newest generation of each pool, in scheduler
    order."""
    devices = []
    for pool, node, device in _published(slices):
        if MEMORY_CAPACITY in (device.get("capacity") or {}):
            continue  # a memory device: the CPU DeviceClass never matches it
        capacity = (device.get("capacity") or {}).get(CPU_CAPACITY)
        devices.append(
            Device(
                pool=pool,
                name=str(device["name"]),
                node=node,
                numa=_numa(device.get("attributes") or {}),
                capacity=(
                    _quantity(capacity.get("value"), f"device {device['name']}")
                    if isinstance(capacity, Mapping) and device.get("allowMultipleAllocations")
                    else None
                ),
                cpu_ids=_cpu_ids(device.get("attributes") or {}),
            )
        )
    return sorted(devices, key=lambda d: d.key)


def memory_devices_of(slices: Iterable[Mapping[str, Any]]) -> list[MemoryDevice]:
    """The memory devices of our driver (those with the `dra.cpu/memory` capacity, what the
    memory DeviceClass selects) in the newest generation of each pool, in scheduler order."""
    devices = []
    for pool, node, device in _published(slices):
        capacities = device.get("capacity") or {}
        if MEMORY_CAPACITY not in capacities or not device.get("allowMultipleAllocations"):
            continue
        where = f"device {device['name']}"
        devices.append(
            MemoryDevice(
                pool=pool,
                name=str(device["name"]),
                node=node,
                numa=_numa(device.get("attributes") or {}),
                capacity=tuple(
                    sorted(
                        (str(name), byte_count(str((value or {}).get("value")), f"{where} {name}"))
                        for name, value in capacities.items()
                    )
                ),
            )
        )
    return sorted(devices, key=lambda d: d.key)


def _cpu_ids(attributes: Mapping[str, Any]) -> CPUSet | None:
    value = attributes.get(ATTR_CPU_IDS)
    if isinstance(value, Mapping) and isinstance(value.get("string"), str):
        return CPUSet.parse(value["string"])
    return None


def for_cpuset(devices: list[Device], cpuset: CPUSet) -> list[Device]:
    """Allocator external: the devices whose CPU list attribute holds all of `cpuset` (what an
    external allocator picks from)."""
    if not any(device.cpu_ids is not None for device in devices):
        raise InvalidInputError(
            "--cpuset needs the node's allocator to be external "
            f"(its devices publish no {ATTR_CPU_IDS})"
        )
    fitting = [d for d in devices if d.cpu_ids is not None and cpuset.issubset(d.cpu_ids)]
    if not fitting:
        offered = ", ".join(f"{d.name}={d.cpu_ids.format()}" for d in devices if d.cpu_ids)
        raise InvalidInputError(
            f"--cpuset {cpuset.format()}: no device offers all of these CPUs ({offered})"
        )
    return fitting


def results_of(claims: Iterable[Mapping[str, Any]]) -> list[Result]:
    """Our driver's allocation results recorded in the given ResourceClaims."""
    results = []
    for claim in claims:
        allocation = (claim.get("status") or {}).get("allocation") or {}
        for entry in (allocation.get("devices") or {}).get("results") or []:
            if entry.get("driver") != DRIVER_NAME:
                continue
            capacities = entry.get("consumedCapacity") or {}
            consumed = capacities.get(CPU_CAPACITY)
            results.append(
                Result(
                    request=str(entry.get("request", "")),
                    pool=str(entry.get("pool", "")),
                    device=str(entry.get("device", "")),
                    consumed=None if consumed is None else _quantity(consumed, "claim result"),
                    memory=tuple(
                        sorted(
                            (str(name), byte_count(str(value), f"claim result {name}"))
                            for name, value in capacities.items()
                            if name != CPU_CAPACITY
                        )
                    ),
                )
            )
    return results


def allocate(
    devices: list[Device],
    allocated: list[Result],
    cpus: int,
    *,
    numa: int | None = None,
    request: str = "cpus",
) -> list[Result]:
    """The results the scheduler would record for a claim of `cpus` CPUs."""
    if cpus <= 0:
        raise InvalidInputError(f"--cpus must be a positive number, got {cpus}")
    if not devices:
        raise InsufficientCPUsError(f"no {DRIVER_NAME} devices are published yet")
    candidates = devices
    if numa is not None:
        if all(device.numa is None for device in devices):
            raise InvalidInputError(
                f"--numa {numa}: the published devices carry no NUMA node attribute"
            )
        candidates = [device for device in devices if device.numa == numa]
        if not candidates:
            known = sorted({d.numa for d in devices if d.numa is not None})
            raise InvalidInputError(f"--numa {numa}: no device on that NUMA node (nodes: {known})")
    if all(device.capacity is not None for device in candidates):
        return [_grouped(candidates, allocated, cpus, request)]
    return _individual(candidates, allocated, cpus, request)


def _grouped(devices: list[Device], allocated: list[Result], cpus: int, request: str) -> Result:
    consumed: Counter[tuple[str, str]] = Counter()
    for result in allocated:
        consumed[(result.pool, result.device)] += result.consumed or 0
    free = {device.key: (device.capacity or 0) - consumed[device.key] for device in devices}
    for device in devices:
        if free[device.key] >= cpus:
            return Result(request, device.pool, device.name, cpus)
    summary = ", ".join(f"{name}={left}" for (_, name), left in free.items())
    raise InsufficientCPUsError(f"no device has {cpus} free CPUs (free: {summary})")


def _individual(
    devices: list[Device], allocated: list[Result], cpus: int, request: str
) -> list[Result]:
    taken = {(result.pool, result.device) for result in allocated}
    free = [device for device in devices if device.key not in taken]
    if len(free) < cpus:
        raise InsufficientCPUsError(f"{cpus} CPUs requested, {len(free)} CPU devices are free")
    return [Result(request, device.pool, device.name, None) for device in free[:cpus]]


def allocate_memory(
    devices: list[MemoryDevice],
    allocated: list[Result],
    numa: int,
    wants: Mapping[str, int],
    *,
    request: str = "memory",
) -> Result:
    """The result the scheduler would record for a memory request of `wants` (bytes per
    capacity) on NUMA node `numa`: the first memory device of that node that still has every
    amount free, consuming them."""
    on_node = [device for device in devices if device.numa == numa]
    if not on_node:
        raise InsufficientMemoryError(f"no memory device on NUMA node {numa}")
    consumed: Counter[tuple[str, str, str]] = Counter()
    for result in allocated:
        for name, amount in result.memory:
            consumed[(result.pool, result.device, name)] += amount
    shortfall = ""
    for device in on_node:
        capacity = dict(device.capacity)
        for name, amount in sorted(wants.items()):
            if name not in capacity:
                shortfall = f"{device.name} has no {name}"
                break
            free = capacity[name] - consumed[(device.pool, device.name, name)]
            if amount > free:
                shortfall = (
                    f"{device.name} {name}: wants {binary_quantity(amount)}, "
                    f"{binary_quantity(max(0, free))} free"
                )
                break
        else:
            return Result(request, device.pool, device.name, None, tuple(sorted(wants.items())))
    raise InsufficientMemoryError(shortfall)


def allocate_claim(
    devices: list[Device],
    memory_devices: list[MemoryDevice],
    allocated: list[Result],
    cpus: int,
    wants: Mapping[str, int],
    *,
    numa: int | None = None,
    request: str = "cpus",
    memory_request: str = "memory",
) -> list[Result]:
    """The results for a claim of `cpus` CPUs and, when `wants` is not empty, memory on the
    same NUMA node (the claim's numaNode constraint): the first node, in node order, where
    both fit; with `numa`, that node only."""
    if not wants:
        return allocate(devices, allocated, cpus, numa=numa, request=request)
    if not memory_devices:
        raise InvalidInputError(
            "the node publishes no memory devices (its driver configuration needs "
            "publishMemoryDevices: true)"
        )
    nodes = sorted({device.numa for device in devices if device.numa is not None})
    if not nodes:
        raise InvalidInputError(
            "the published CPU devices carry no NUMA node attribute, so no memory device "
            "can be on the node of the CPUs"
        )
    if numa is not None:
        nodes = [numa]
    refusals = []
    for node in nodes:
        try:
            results = allocate(devices, allocated, cpus, numa=node, request=request)
            memory = allocate_memory(memory_devices, allocated, node, wants, request=memory_request)
        except InsufficientCPUsError as exc:  # InsufficientMemoryError too
            refusals.append((node, exc))
            continue
        return [*results, memory]
    if len(refusals) == 1:
        raise refusals[0][1]
    summary = "; ".join(f"node {node}: {exc}" for node, exc in refusals)
    raise InsufficientMemoryError(f"no NUMA node has the CPUs and the memory ({summary})")
