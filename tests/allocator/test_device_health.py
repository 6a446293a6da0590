"""Device health from the topology, one table row per rule (`device_health.assess`).

Machine: single-4c8t (CPUs 0-7, siblings n / n+4), grouped by machine unless a row says
otherwise; each row starts from the machine whole and applies one refresh.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from dracpu.allocator.domain.device_health import HealthBook, assess
from dracpu.allocator.domain.devices import DeviceOptions, Mode, build_devices
from dracpu.core.cpuset import CPUSet
from dracpu.core.machine import Machine

Machines = Callable[[str], Machine]


def without(machine: Machine, offline: str) -> Machine:
    gone = CPUSet.parse(offline)
    return Machine.build([c for c in machine.cpus if c.cpu_id not in gone], machine.online - gone)


@dataclass(frozen=True)
class Row:
    id: str
    offline: str = ""
    error: str = ""
    mode: Mode = "grouped"
    reserved_after: str = ""
    expect: dict[str, tuple[str, str]] | None = None  # device -> (status, missing)


ROWS = [
    Row("whole", expect={"cpudevmachine": ("Healthy", "")}),
    Row("cpus-offline", offline="3,7", expect={"cpudevmachine": ("Unhealthy", "3,7")}),
    Row("unreadable", error="gone", expect={"cpudevmachine": ("Unknown", "")}),
    Row(
        "unreadable-wins-over-offline",
        offline="3",
        error="gone",
        expect={"cpudevmachine": ("Unknown", "")},
    ),
    # Reserving CPUs shrinks the device, but its CPUs are online: not a failure.
    Row("reserved-is-not-offline", reserved_after="0,4", expect={"cpudevmachine": ("Healthy", "")}),
    # Individual mode: CPU 7 is the last device (threads of a core are adjacent: 0,4,1,5,...);
    # its device leaves the slice and is still reported, unhealthy.
    Row(
        "individual-withdrawn",
        offline="7",
        mode="individual",
        expect={
            **{f"cpudev{n:03d}": ("Healthy", "") for n in range(7)},
            "cpudev007": ("Unhealthy", "7"),
        },
    ),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_assess(machines: Machines, row: Row) -> None:
    whole = machines("single-4c8t")
    group_by = "machine" if row.mode == "grouped" else "numanode"
    options = DeviceOptions(mode=row.mode, group_by=group_by)
    book = assess(HealthBook(), build_devices(whole, options), whole.cpu_set, "", 1.0)
    assert {h.status for h in book.entries.values()} == {"Healthy"}

    after = without(whole, row.offline) if row.offline else whole
    options = DeviceOptions(
        mode=row.mode, group_by=group_by, reserved=CPUSet.parse(row.reserved_after)
    )
    book = assess(book, build_devices(after, options), after.cpu_set, row.error, 2.0)
    got = {name: (h.status, h.missing.format()) for name, h in book.entries.items()}
    assert got == row.expect


def test_back_online_is_healthy_and_since_tracks_changes(machines: Machines) -> None:
    whole = machines("single-4c8t")
    options = DeviceOptions(group_by="machine")
    book = assess(HealthBook(), build_devices(whole, options), whole.cpu_set, "", 1.0)
    part = without(whole, "2")
    book = assess(book, build_devices(part, options), part.cpu_set, "", 2.0)
    book = assess(book, build_devices(part, options), part.cpu_set, "", 3.0)
    (entry,) = book.entries.values()
    assert (entry.status, entry.since) == ("Unhealthy", 2.0)
    assert "CPUs 2 of the device are offline" in entry.message
    book = assess(book, build_devices(whole, options), whole.cpu_set, "", 4.0)
    (entry,) = book.entries.values()
    assert (entry.status, entry.since, entry.missing) == ("Healthy", 4.0, CPUSet())
