"""Discovery on this machine's /sys agrees with the kernel files read directly."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dracpu.core.cpuset import CPUSet
from dracpu.topology.discovery import discover

SYS = Path("/sys")
CPU_DIR = SYS / "devices/system/cpu"

pytestmark = pytest.mark.skipif(not (CPU_DIR / "online").exists(), reason="no sysfs here")


def read(path: Path) -> str:
    return path.read_text().strip()


def test_every_online_cpu_is_discovered_or_skipped_with_a_reason() -> None:
    machine = discover(SYS)
    online = CPUSet.parse(read(CPU_DIR / "online"))
    assert machine.online == online
    skipped = {int(reason.split(":")[0].removeprefix("cpu ")) for reason in machine.skipped}
    assert machine.cpu_set | CPUSet(skipped) == online
    assert machine.cpu_set.isdisjoint(CPUSet(skipped))


def test_facts_match_the_kernel_files() -> None:
    machine = discover(SYS)
    for cpu in machine.cpus:
        topology = CPU_DIR / f"cpu{cpu.cpu_id}" / "topology"
        assert cpu.socket_id == int(read(topology / "physical_package_id"))
        assert cpu.core_id == int(read(topology / "core_id"))
        threads = CPUSet.parse(read(topology / "thread_siblings_list"))
        assert cpu.siblings == threads & machine.cpu_set
        nodes = [e for e in os.listdir(CPU_DIR / f"cpu{cpu.cpu_id}") if e.startswith("node")]
        assert cpu.numa_node_id == (int(nodes[0].removeprefix("node")) if nodes else 0)
        assert cpu.cpu_id in cpu.numa_node_cpus


def test_summary_is_consistent() -> None:
    machine = discover(SYS)
    summary = machine.summary()
    assert summary["numCPUs"] == len(machine.cpus) > 0
    assert 1 <= summary["numSockets"] <= summary["numCores"] <= summary["numCPUs"]
    assert summary["smtEnabled"] == any(len(c.siblings) > 1 for c in machine.cpus)
