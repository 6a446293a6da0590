"""Device health as the kubelet is told it (DRAResourceHealth), derived from the topology.

Pure: `assess` compares the CPUs each device had when it was last whole with the CPUs online
now. A device is Unhealthy while some of those CPUs are offline or gone (also when the device
itself is no longer published because of it), Unknown while the topology cannot be read, and
Healthy again once its CPUs are back. A device that changes or disappears with all its CPUs
still online (a configuration change, a claim holding its CPUs) is not a failure: it is simply
tracked as it is now.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from dracpu.allocator.domain.devices import DeviceModel
from dracpu.core.cpuset import CPUSet

Status = Literal["Healthy", "Unhealthy", "Unknown"]
STATUSES: tuple[Status, ...] = ("Healthy", "Unhealthy", "Unknown")


@dataclass(frozen=True, slots=True)
class Health:
    status: Status
    message: str
    missing: CPUSet = field(default_factory=CPUSet)  # CPUs of the device that are not online
    since: float = 0.0  # unix seconds of the last status change


@dataclass(frozen=True)
class HealthBook:
    """Per device name: the CPUs it had when last whole, and its current health."""

    expected: Mapping[str, CPUSet] = field(default_factory=dict)
    entries: Mapping[str, Health] = field(default_factory=dict)

    def count(self, status: Status) -> int:
        return sum(1 for h in self.entries.values() if h.status == status)


def _entry(
    previous: Health | None, status: Status, message: str, missing: CPUSet, now: float
) -> Health:
    since = previous.since if previous is not None and previous.status == status else now
    return Health(status, message, missing, since)


def assess(
    book: HealthBook,
    devices: DeviceModel,
    online: CPUSet,
    topology_error: str,
    now: float,
) -> HealthBook:
    """The book after a topology refresh (or a failed one: `topology_error` non-empty)."""
    expected: dict[str, CPUSet] = {}
    entries: dict[str, Health] = {}
    current = devices.by_name
    for name in sorted(set(book.expected) | set(current)):
        device = current.get(name)
        had = book.expected.get(name, device.cpus if device is not None else None)
        if had is None:
            continue
        previous = book.entries.get(name)
        missing = had - online
        if topology_error:
            expected[name] = had
            message = f"the CPU topology cannot be read: {topology_error}"
            entries[name] = _entry(previous, "Unknown", message, CPUSet(), now)
        elif missing:
            expected[name] = had
            withdrawn = "" if device is not None else "; the device is withdrawn"
            message = f"CPUs {missing.format()} of the device are offline{withdrawn}"
            entries[name] = _entry(previous, "Unhealthy", message, missing, now)
        elif device is not None:
            expected[name] = device.cpus
            message = "NUMA node memory read" if device.kind == "memory" else "CPUs online"
            entries[name] = _entry(previous, "Healthy", message, CPUSet(), now)
    return HealthBook(expected, entries)
