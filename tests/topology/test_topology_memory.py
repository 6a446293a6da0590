"""Memory discovery on odd sysfs trees: per NUMA node, MemTotal and every hugepage pool as the
kernel writes them, and for any file that cannot be read, an absent value and the reason,
never an exception."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dracpu.core.errors import InvalidInputError
from dracpu.core.machine import Machine
from dracpu.core.memory import HugepagePool, NodeMemory, binary_quantity
from dracpu.topology.discovery import discover
from dracpu.topology.fixtures import write_fixture
from dracpu.topology.memory import discover_memory, read_node_memory
from dracpu.topology.sysfs import SysfsReader

NODE0 = "devices/system/node/node0"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return write_fixture("numa4-hugepages", tmp_path / "sys")


def write(root: Path, relative: str, data: str | bytes) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data)


def memory_of(machine: Machine, node: int) -> NodeMemory | None:
    return next((m for m in machine.memory if m.node == node), None)


def node0(root: Path) -> NodeMemory:
    return read_node_memory(SysfsReader(root), 0)


def test_every_node_of_the_fixture_is_read_in_node_order(root: Path) -> None:
    memory = discover_memory(SysfsReader(root))
    assert [m.node for m in memory] == [0, 1, 2, 3]
    assert memory[1] == NodeMemory(1, 8 << 20, (HugepagePool(2048, 256, 256),))
    assert memory[2].hugepages == (HugepagePool(2048, 0, 0), HugepagePool(1 << 20, 4, 3))


def test_discovery_carries_the_memory_in_the_machine(root: Path) -> None:
    machine = discover(root)
    assert machine.memory == discover_memory(SysfsReader(root))
    assert memory_of(machine, 3) == NodeMemory(3, 12 << 20, (HugepagePool(2048, 1024, 1000),))
    assert memory_of(machine, 7) is None


@pytest.mark.parametrize(
    ("meminfo", "total"),
    [
        ("Node 0 MemTotal:       16318412 kB\nNode 0 MemFree:  1 kB\n", 16318412),
        # No "Node N" prefix (as /proc/meminfo), no unit, extra spacing: the value is read.
        ("MemTotal: 1024\n", 1024),
        ("  \nNode 0 MemFree: 5 kB\nNode 0 MemTotal:\t2048 kB\n\n", 2048),
        # A memoryless node: its MemTotal is 0, which is a value, not a problem.
        ("Node 0 MemTotal:              0 kB\n", 0),
    ],
    ids=["kernel", "bare", "tabs-and-blank-lines", "memoryless"],
)
def test_mem_total_in_the_spellings_a_kernel_writes(root: Path, meminfo: str, total: int) -> None:
    write(root, f"{NODE0}/meminfo", meminfo)
    memory = node0(root)
    assert (memory.mem_total_kib, memory.problems) == (total, ())


@pytest.mark.parametrize(
    ("meminfo", "reason"),
    [
        ("Node 0 MemFree: 5 kB\n", "no MemTotal line"),
        ("Node 0 MemTotal: lots kB\n", "no MemTotal line"),
        ("Node 0 MemTotal: -5 kB\n", "no MemTotal line"),
        ("Node 0 MemTotal: 5 MB\n", "no MemTotal line"),
        ("", "no MemTotal line"),
        ("Node 0 MemTotal: 5 kB\nNode 0 MemTotal: 6 kB\n", "more than one MemTotal line"),
        (b"Node 0 MemTotal: \xff\xfe kB\n", "not ASCII text"),
    ],
    ids=["no-line", "word", "negative", "other-unit", "empty", "twice", "binary"],
)
def test_a_garbled_meminfo_leaves_mem_total_absent_and_says_why(
    root: Path, meminfo: str | bytes, reason: str
) -> None:
    write(root, f"{NODE0}/meminfo", meminfo)
    memory = node0(root)
    assert memory.mem_total_kib is None
    assert memory.mem_total_bytes is None and memory.regular_bytes is None
    assert memory.problems == (f"{NODE0}/meminfo: {reason}",)
    # The pools are read all the same.
    assert [p.size_kib for p in memory.hugepages] == [2048, 1 << 20]


def test_a_missing_meminfo_is_absent_with_the_reason(root: Path) -> None:
    (root / NODE0 / "meminfo").unlink()
    assert node0(root).problems == (f"{NODE0}/meminfo: missing",)
    assert node0(root).mem_total_kib is None


def test_a_meminfo_that_is_a_directory_or_a_fifo_is_not_read(root: Path) -> None:
    meminfo = root / NODE0 / "meminfo"
    meminfo.unlink()
    meminfo.mkdir()
    assert node0(root).problems == (f"{NODE0}/meminfo: Is a directory",)
    meminfo.rmdir()
    os.mkfifo(meminfo)
    assert node0(root).problems == (f"{NODE0}/meminfo: not a regular file",)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file whatever its mode")
def test_an_unreadable_meminfo_is_absent_with_the_reason(root: Path) -> None:
    (root / NODE0 / "meminfo").chmod(0)
    assert node0(root).problems == (f"{NODE0}/meminfo: Permission denied",)


def test_no_hugepages_directory_means_no_pools_and_no_problem(root: Path) -> None:
    for pool in (root / NODE0 / "hugepages").iterdir():
        for item in pool.iterdir():
            item.unlink()
        pool.rmdir()
    (root / NODE0 / "hugepages").rmdir()
    memory = node0(root)
    assert (memory.hugepages, memory.problems) == ((), ())
    assert memory.regular_bytes == 16 << 30


def test_a_pool_without_a_usable_page_count_is_left_out_and_said(root: Path) -> None:
    pools = f"{NODE0}/hugepages"
    write(root, f"{pools}/hugepages-2048kB/nr_hugepages", "many\n")
    write(root, f"{pools}/hugepages-1048576kB/nr_hugepages", "-3\n")
    memory = node0(root)
    assert memory.hugepages == ()
    assert memory.problems == (
        f"{pools}/hugepages-2048kB/nr_hugepages: not an integer: 'many'",
        f"{pools}/hugepages-1048576kB/nr_hugepages: negative value -3",
    )


def test_an_unreadable_free_count_keeps_the_pool_without_it(root: Path) -> None:
    pool = f"{NODE0}/hugepages/hugepages-2048kB"
    (root / pool / "free_hugepages").unlink()
    memory = node0(root)
    assert memory.hugepages[0] == HugepagePool(2048, 512, None)
    assert memory.problems == (f"{pool}/free_hugepages: missing",)


def test_odd_entries_of_the_hugepages_directory_are_ignored_or_said(root: Path) -> None:
    pools = f"{NODE0}/hugepages"
    write(root, f"{pools}/hugepages-2MB/nr_hugepages", "4\n")
    write(root, f"{pools}/README", "not a pool\n")
    write(root, f"{pools}/hugepages-0kB/nr_hugepages", "4\n")
    write(root, f"{pools}/hugepages-64kB/nr_hugepages", "16\n")
    memory = node0(root)
    # Ascending by page size; the 64 KiB pool has no free count.
    assert [(p.size_kib, p.total, p.free) for p in memory.hugepages] == [
        (64, 16, None),
        (2048, 512, 500),
        (1 << 20, 2, 2),
    ]
    assert memory.problems == (
        f"{pools}/hugepages-0kB: a pool of 0 kB pages",
        f"{pools}/hugepages-64kB/free_hugepages: missing",
    )


def test_node_directories_without_cpus_are_read_and_other_entries_ignored(root: Path) -> None:
    write(root, "devices/system/node/node7/meminfo", "Node 7 MemTotal: 4096 kB\n")
    write(root, "devices/system/node/nodefoo/meminfo", "Node 9 MemTotal: 4096 kB\n")
    write(root, "devices/system/node/has_memory", "0-3,7\n")
    memory = discover_memory(SysfsReader(root))
    assert [m.node for m in memory] == [0, 1, 2, 3, 7]
    assert memory[-1] == NodeMemory(7, 4096)
    assert memory_of(discover(root), 7) == NodeMemory(7, 4096)


def test_a_kernel_without_numa_directories_has_no_memory_entries(tmp_path: Path) -> None:
    root = write_fixture("small-vm", tmp_path / "sys")
    assert not (root / "devices/system/node").exists()
    assert discover_memory(SysfsReader(root)) == ()
    assert discover(root).memory == ()


def test_regular_memory_is_mem_total_less_the_pools(root: Path) -> None:
    memory = node0(root)
    assert memory.mem_total_bytes == 16 << 30
    assert memory.hugepage_bytes == 512 * (2 << 20) + 2 * (1 << 30)
    assert memory.regular_bytes == (16 << 30) - (1 << 30) - (2 << 30)
    # Pools larger than MemTotal (a tree no kernel writes) leave none, never a negative.
    write(root, f"{NODE0}/meminfo", "Node 0 MemTotal: 1024 kB\n")
    assert node0(root).regular_bytes == 0


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0, "0"),
        (1023, "1023"),
        (1024, "1Ki"),
        (1536, "1536"),
        (2 << 20, "2Mi"),
        (1 << 30, "1Gi"),
        (13 << 30, "13Gi"),
        ((12 << 30) - (4 << 20), "12284Mi"),
        (1 << 60, "1Ei"),
        (1 << 70, "1024Ei"),
    ],
)
def test_byte_counts_are_written_as_kubernetes_writes_binary_quantities(
    value: int, text: str
) -> None:
    assert binary_quantity(value) == text


def test_the_wire_form_keeps_absent_values_absent_and_older_peers_send_none(
    root: Path,
) -> None:
    (root / NODE0 / "meminfo").unlink()
    (root / NODE0 / "hugepages/hugepages-2048kB/free_hugepages").unlink()
    machine = discover(root)
    message = machine.to_proto()
    assert message.memory[0].mem_total_kib == -1
    assert message.memory[0].hugepages[0].free == -1
    assert Machine.from_proto(message).memory == machine.memory
    # A topology service from before memory discovery: the field is empty, so is the memory.
    del message.memory[:]
    older = Machine.from_proto(message)
    assert older.memory == ()
    assert older.fingerprint == machine.fingerprint


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ({"numaNodeID": 0}, "memory must be a list"),
        ([{"numaNodeID": -1, "memTotalKiB": 4}], "memory[0]: numaNodeID: expected a whole number"),
        ([{"numaNodeID": 0, "memTotalKiB": "4G"}], "memory[0]: memTotalKiB: expected a whole"),
        (
            [{"numaNodeID": 0, "hugepages": [{"sizeKiB": 0, "total": 1}]}],
            "sizeKiB must be positive",
        ),
        ([{"numaNodeID": 0, "hugepages": [{"sizeKiB": 2048}]}], "hugepages[0]: total: expected"),
    ],
    ids=["not-a-list", "negative-node", "string-total", "zero-size", "no-total"],
)
def test_a_reports_garbled_memory_is_refused_naming_the_field(
    root: Path, entries: object, message: str
) -> None:
    report = {"cpus": discover(root).to_report_cpus(), "memory": entries}
    with pytest.raises(InvalidInputError) as refused:
        Machine.from_report(report, "node.yaml")
    assert str(refused.value).startswith("node.yaml: ")
    assert message in str(refused.value)
