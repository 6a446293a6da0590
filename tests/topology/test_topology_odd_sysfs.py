"""Odd, partial and broken sysfs trees: discovery skips what it cannot use, says why, and never
crashes; a root that is no sysfs tree at all is refused with a message naming the problem."""

from __future__ import annotations

import io
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from logformats import klog_lines

from dracpu.core import log
from dracpu.core.errors import TopologyError
from dracpu.core.machine import Machine
from dracpu.topology.discovery import discover
from dracpu.topology.fixtures import write_fixture

CPU = "devices/system/cpu"
AS_ROOT = os.geteuid() == 0


def put(root: Path, relative: str, content: str | bytes) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)


def remove(root: Path, relative: str) -> None:
    path = root / relative
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


def make_dir(root: Path, relative: str) -> None:
    remove(root, relative)
    (root / relative).mkdir()


def symlink_loop(root: Path, relative: str) -> None:
    remove(root, relative)
    (root / relative).symlink_to((root / relative).name)


@dataclass(frozen=True)
class Case:
    fixture: str
    damage: Callable[[Path], None]
    check: Callable[[Machine], None]


def skipped(cpu: int, reason: str) -> Callable[[Machine], None]:
    def check(machine: Machine) -> None:
        assert cpu not in machine.cpu_set
        assert len(machine.skipped) == 1
        assert machine.skipped[0].startswith(f"cpu {cpu}: ")
        assert reason in machine.skipped[0]

    return check


def cpu_fact(cpu: int, **facts: object) -> Callable[[Machine], None]:
    def check(machine: Machine) -> None:
        assert machine.skipped == ()
        info = machine.by_id[cpu]
        for name, value in facts.items():
            actual = getattr(info, name)
            actual = actual.format() if hasattr(actual, "format") else actual
            assert actual == value, f"cpu {cpu} {name}"

    return check


CASES: dict[str, Case] = {
    "core_id missing: CPU skipped, its sibling becomes a one-thread core": Case(
        "single-4c8t",
        lambda r: remove(r, f"{CPU}/cpu3/topology/core_id"),
        lambda m: (
            skipped(3, "cpu3/topology/core_id: missing")(m),
            cpu_fact_siblings(m, 7, "7"),
        ),
    ),
    "physical_package_id garbage: CPU skipped": Case(
        "single-4c8t",
        lambda r: put(r, f"{CPU}/cpu2/topology/physical_package_id", "socket zero\n"),
        skipped(2, "not an integer: 'socket zero'"),
    ),
    "negative socket: CPU skipped": Case(
        "single-4c8t",
        lambda r: put(r, f"{CPU}/cpu1/topology/physical_package_id", "-1\n"),
        skipped(1, "negative value -1"),
    ),
    "topology directory gone: CPU skipped": Case(
        "single-4c8t",
        lambda r: remove(r, f"{CPU}/cpu5/topology"),
        skipped(5, "physical_package_id: missing"),
    ),
    "core_id is a directory: CPU skipped with the OS reason": Case(
        "single-4c8t",
        lambda r: make_dir(r, f"{CPU}/cpu6/topology/core_id"),
        skipped(6, "Is a directory"),
    ),
    "core_id unreadable (a symlink loop): CPU skipped with the OS reason": Case(
        "single-4c8t",
        lambda r: symlink_loop(r, f"{CPU}/cpu6/topology/core_id"),
        skipped(6, "Too many levels of symbolic links"),
    ),
    "binary junk in core_id: CPU skipped": Case(
        "single-4c8t",
        lambda r: put(r, f"{CPU}/cpu4/topology/core_id", b"\xff\xfe\x00"),
        skipped(4, "not ASCII text"),
    ),
    "cluster_id garbage: cluster none, CPU kept": Case(
        "arm-clusters",
        lambda r: put(r, f"{CPU}/cpu5/topology/cluster_id", "x"),
        cpu_fact(5, cluster_id=-1, core_id=1),
    ),
    "L3 id garbage: named after the lowest CPU sharing it": Case(
        "xeon-2s-ht",
        lambda r: put(r, f"{CPU}/cpu10/cache/index3/id", "??"),
        lambda m: [cpu_fact(c, uncore_cache_id=10)(m) for c in (10, 11, 19, 30, 39)],
    ),
    "L3 with neither id nor shared list: CPU skipped": Case(
        "xeon-2s-ht",
        lambda r: (
            remove(r, f"{CPU}/cpu10/cache/index3/id"),
            put(r, f"{CPU}/cpu10/cache/index3/shared_cpu_list", "1-0"),
        ),
        skipped(10, "L3 cache has no usable id nor shared_cpu_list"),
    ),
    "cache directory missing: no L3 for that CPU, CPU kept": Case(
        "single-4c8t",
        lambda r: remove(r, f"{CPU}/cpu0/cache"),
        lambda m: (cpu_fact(0, uncore_cache_id=-1)(m), cpu_fact(1, uncore_cache_id=0)(m)),
    ),
    "no nodeN entry in a CPU dir: node 0": Case(
        "xeon-2s-ht",
        lambda r: remove(r, f"{CPU}/cpu10/node1"),
        cpu_fact(10, numa_node_id=0, socket_id=1),
    ),
    "node cpulist garbage: derived from the node's CPUs": Case(
        "snc",
        lambda r: put(r, "devices/system/node/node1/cpulist", "zero to seven"),
        cpu_fact(8, numa_node_id=1, numa_node_cpus="8-15,40-47"),
    ),
    "online list missing: online CPUs from the cpu directories": Case(
        "offline-middle",
        lambda r: remove(r, f"{CPU}/online"),
        lambda m: expect_online(m, "0-3,6-8,10-15"),
    ),
    "online list absurd: online CPUs from the cpu directories": Case(
        "offline-middle",
        lambda r: put(r, f"{CPU}/online", "0-99999999"),
        lambda m: expect_online(m, "0-3,6-8,10-15"),
    ),
    "E-core list garbage: every core standard": Case(
        "intel-hybrid",
        lambda r: put(r, "devices/cpu_atom/cpus", "16-"),
        lambda m: assert_all(m, lambda c: c.core_type == "standard"),
    ),
    "P-core list missing on a hybrid CPU: E-cores still known": Case(
        "intel-hybrid",
        lambda r: remove(r, "devices/cpu_core/cpus"),
        lambda m: (cpu_fact(16, core_type="e-core")(m), cpu_fact(0, core_type="standard")(m)),
    ),
    "smt/control missing: empty": Case(
        "single-4c8t",
        lambda r: remove(r, f"{CPU}/smt"),
        lambda m: check_smt_control(m, ""),
    ),
    "PCIe root affinity garbage: ignored": Case(
        "xeon-2s-ht",
        lambda r: put(r, "devices/pci0000:3a/pci_bus/0000:3a/cpulistaffinity", "all"),
        cpu_fact(0, pcie_roots=("pci0000:00",)),
    ),
    "PCIe root with only a device's local_cpulist": Case(
        "single-4c8t",
        lambda r: (
            remove(r, "devices/pci0000:00/pci_bus"),
            put(r, "devices/pci0000:00/0000:00:1f.0/local_cpulist", "0-1"),
        ),
        lambda m: (cpu_fact(1, pcie_roots=("pci0000:00",))(m), cpu_fact(2, pcie_roots=())(m)),
    ),
    "directories that are not host bridges: ignored": Case(
        "single-4c8t",
        lambda r: (
            put(r, "devices/pci0000:0g/pci_bus/0000:0g/cpulistaffinity", "0-7"),
            put(r, "devices/pciXXXX:00/pci_bus/XXXX:00/cpulistaffinity", "0-7"),
        ),
        cpu_fact(0, pcie_roots=("pci0000:00",)),
    ),
}


def cpu_fact_siblings(machine: Machine, cpu: int, siblings: str) -> None:
    assert machine.by_id[cpu].siblings.format() == siblings


def expect_online(machine: Machine, online: str) -> None:
    assert machine.online.format() == online
    assert machine.cpu_set.format() == online
    assert machine.skipped == ()


def assert_all(machine: Machine, predicate: Callable[..., bool]) -> None:
    assert machine.skipped == ()
    assert all(predicate(c) for c in machine.cpus)


def check_smt_control(machine: Machine, value: str) -> None:
    assert machine.smt_control == value


@pytest.fixture
def log_lines() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    log.setup(2, "test", stream=stream)
    yield stream
    log.setup(0)


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_damaged_tree(case: Case, tmp_path: Path, log_lines: io.StringIO) -> None:
    root = write_fixture(case.fixture, tmp_path / "sys")
    case.damage(root)
    case.check(discover(root))


def test_skipping_a_cpu_logs_the_reason(tmp_path: Path, log_lines: io.StringIO) -> None:
    root = write_fixture("single-4c8t", tmp_path / "sys")
    remove(root, f"{CPU}/cpu3/topology/core_id")
    discover(root)
    line = next(x for x in klog_lines(log_lines.getvalue()) if "skipping CPU" in x.msg)
    assert line.severity == "W"
    assert line.values["cpu"] == 3
    assert str(line.values["reason"]).endswith("core_id: missing")


def test_thread_siblings_disagreeing_with_core_ids_are_reported(
    tmp_path: Path, log_lines: io.StringIO
) -> None:
    root = write_fixture("single-4c8t", tmp_path / "sys")
    put(root, f"{CPU}/cpu0/topology/thread_siblings_list", "0-1")
    discover(root)
    assert "thread_siblings_list disagrees with core ids" in log_lines.getvalue()


def test_discovery_duration_logged_at_level_2(tmp_path: Path, log_lines: io.StringIO) -> None:
    discover(write_fixture("small-vm", tmp_path / "sys"))
    (line,) = [x for x in klog_lines(log_lines.getvalue()) if x.msg == "topology discovered"]
    assert isinstance(line.values["ms"], float)


ROOT_ERRORS: dict[str, tuple[Callable[[Path], Path], str]] = {
    "nonexistent": (lambda t: t / "nope", "does not exist"),
    "a file": (lambda t: (t / "file").touch() or t / "file", "is not a directory"),
    "no devices/system/cpu": (lambda t: t, "is not a sysfs tree: devices/system/cpu is missing"),
    "no CPU dirs, no online list": (
        lambda t: (t / CPU).mkdir(parents=True) or t,
        "no online CPUs",
    ),
}


@pytest.mark.parametrize("make, message", list(ROOT_ERRORS.values()), ids=list(ROOT_ERRORS))
def test_unusable_roots_are_refused(
    make: Callable[[Path], Path], message: str, tmp_path: Path
) -> None:
    with pytest.raises(TopologyError, match=message):
        discover(make(tmp_path))


def test_no_cpu_with_complete_topology_is_an_error(tmp_path: Path) -> None:
    root = write_fixture("small-vm", tmp_path / "sys")
    for cpu in (0, 1):
        remove(root, f"{CPU}/cpu{cpu}/topology")
    with pytest.raises(TopologyError, match=r"no CPU under .* has a complete topology; cpu 0:"):
        discover(root)


@pytest.mark.skipif(AS_ROOT, reason="root reads files whatever their mode")
def test_unreadable_root_is_refused(tmp_path: Path) -> None:
    root = write_fixture("small-vm", tmp_path / "sys")
    root.chmod(0)
    try:
        with pytest.raises(TopologyError, match=r"cannot read sysfs root .*Permission denied"):
            discover(root)
    finally:
        root.chmod(0o755)


@pytest.mark.skipif(AS_ROOT, reason="root reads files whatever their mode")
def test_unreadable_file_skips_the_cpu(tmp_path: Path) -> None:
    root = write_fixture("small-vm", tmp_path / "sys")
    (root / f"{CPU}/cpu1/topology/core_id").chmod(0)
    machine = discover(root)
    assert machine.skipped == (
        "cpu 1: devices/system/cpu/cpu1/topology/core_id: Permission denied",
    )
