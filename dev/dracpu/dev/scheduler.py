"""What the Kubernetes scheduler would allocate for a CPU claim, from the published
ResourceSlices and the allocations already recorded in other claims. Pure: no I/O.

Grouped devices (`allowMultipleAllocations` with the CPU capacity) are shared: a claim
takes one device with enough capacity left and records `consumedCapacity`. Individual devices
stand for one CPU each and go to one claim only. Like the scheduler, the first fit in pool and
device-name order wins.
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
from dracpu.core.errors import InsufficientCPUsError, InvalidInputError

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
class Result:
    """One entry of status.allocation.devices.results."""

    request: str
    pool: str
    device: str
    consumed: int | None

    def to_document(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "request": self.request,
            "driver": DRIVER_NAME,
            "pool": self.pool,
            "device": self.device,
        }
        if self.consumed is not None:
            document["consumedCapacity"] = {CPU_CAPACITY: str(self.consumed)}
        return document


def _quantity(value: object, where: str) -> int:
    text = str(value).strip()
    if not text.isdigit():
        raise InvalidInputError(f"{where}: {CPU_CAPACITY} quantity {value!r} is not a CPU count")
    return int(text)


def _numa(attributes: Mapping[str, Any]) -> int | None:
    for name in NUMA_ATTRIBUTES:
        value = attributes.get(name)
        if isinstance(value, Mapping) and isinstance(value.get("int"), int):
            return int(value["int"])
    return None


def devices_of(slices: Iterable[Mapping[str, Any]]) -> list[Device]:
    """The CPU devices of our driver in the newest generation of each pool, in scheduler
    order."""
    ours = [s for s in slices if (s.get("spec") or {}).get("driver") == DRIVER_NAME]
    newest: dict[str, int] = {}
    for item in ours:
        pool = item["spec"].get("pool") or {}
        name = str(pool.get("name", ""))
        newest[name] = max(newest.get(name, 0), int(pool.get("generation", 0)))
    devices = []
    for item in ours:
        spec = item["spec"]
        pool = spec.get("pool") or {}
        name = str(pool.get("name", ""))
        if int(pool.get("generation", 0)) != newest[name]:
            continue
        for device in spec.get("devices") or []:
            if MEMORY_CAPACITY in (device.get("capacity") or {}):
                continue  # a memory device: the CPU DeviceClass never matches it
            capacity = (device.get("capacity") or {}).get(CPU_CAPACITY)
            devices.append(
                Device(
                    pool=name,
                    name=str(device["name"]),
                    node=str(spec.get("nodeName", "")),
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
            consumed = (entry.get("consumedCapacity") or {}).get(CPU_CAPACITY)
            results.append(
                Result(
                    request=str(entry.get("request", "")),
                    pool=str(entry.get("pool", "")),
                    device=str(entry.get("device", "")),
                    consumed=None if consumed is None else _quantity(consumed, "claim result"),
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
