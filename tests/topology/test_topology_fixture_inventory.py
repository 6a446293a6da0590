"""Discovery on every named fixture yields exactly the machine the fixture describes.

Each expectation is written out by hand from how that kind of machine numbers its CPUs, not
computed by the fixture generator, so a wrong generator and a wrong discovery both fail here.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from dracpu.core.cpuset import CPUSet
from dracpu.core.machine import Machine
from dracpu.core.memory import memory_fingerprint
from dracpu.topology.discovery import discover
from dracpu.topology.fixtures import FIXTURES, write_fixture


def cpus(*parts: str) -> str:
    return CPUSet.parse(",".join(parts)).format()


def span(first: int, count: int) -> str:
    return f"{first}-{first + count - 1}"


@dataclass(frozen=True)
class Expected:
    summary: dict[str, object]
    online: str
    sockets: dict[int, str]
    numa: dict[int, str]
    l3: dict[int, str]  # cache id -> CPUs; CPUs in none have -1
    cores: list[str]  # the SMT sibling set of every physical core
    core_id: Callable[[int], int]
    clusters: dict[int, str] = field(default_factory=dict)  # CPUs in none have -1
    core_types: dict[str, str] = field(default_factory=dict)  # default: all standard
    pcie: dict[str, str] = field(default_factory=dict)
    smt_control: str = "on"
    isolated: str = ""
    nohz_full: str = ""
    # NUMA node -> (MemTotal in KiB, {page size in KiB: (nr_hugepages, free_hugepages)}).
    memory: dict[int, tuple[int, dict[int, tuple[int, int]]]] = field(default_factory=dict)


def summary(
    cpus_: int, cores: int, l3: int, sockets: int, nodes: int, smt: bool
) -> dict[str, object]:
    return {
        "numCPUs": cpus_,
        "numCores": cores,
        "numUncoreCache": l3,
        "numSockets": sockets,
        "numNUMANodes": nodes,
        "smtEnabled": smt,
    }


XEON_CORE_IDS = [0, 1, 2, 3, 4, 8, 9, 10, 11, 12]
OFFLINE_MIDDLE_ONLINE = "0-3,6-8,10-15"

EXPECTED: dict[str, Expected] = {
    # Siblings n / n+4.
    "single-4c8t": Expected(
        summary=summary(8, 4, 1, 1, 1, True),
        online="0-7",
        sockets={0: "0-7"},
        numa={0: "0-7"},
        l3={0: "0-7"},
        cores=[f"{c},{c + 4}" for c in range(4)],
        core_id=lambda cpu: cpu % 4,
        pcie={"pci0000:00": "0-7"},
    ),
    # First threads of socket 0 then socket 1, then the second threads: siblings n / n+20.
    "xeon-2s-ht": Expected(
        summary=summary(40, 20, 2, 2, 2, True),
        online="0-39",
        sockets={0: "0-9,20-29", 1: "10-19,30-39"},
        numa={0: "0-9,20-29", 1: "10-19,30-39"},
        l3={0: "0-9,20-29", 1: "10-19,30-39"},
        cores=[f"{c},{c + 20}" for c in range(20)],
        core_id=lambda cpu: XEON_CORE_IDS[cpu % 10],
        pcie={
            "pci0000:00": "0-9,20-29",
            "pci0000:3a": "0-9,20-29",
            "pci0000:80": "10-19,30-39",
            "pci0000:ae": "10-19,30-39",
        },
    ),
    # 128 cores numbered socket-major, second threads from 128; NUMA = 16 cores, L3 = 8 cores.
    "epyc-2s-nps4": Expected(
        summary=summary(256, 128, 16, 2, 8, True),
        online="0-255",
        sockets={s: cpus(span(64 * s, 64), span(128 + 64 * s, 64)) for s in range(2)},
        numa={n: cpus(span(16 * n, 16), span(128 + 16 * n, 16)) for n in range(8)},
        l3={k: cpus(span(8 * k, 8), span(128 + 8 * k, 8)) for k in range(16)},
        cores=[f"{c},{c + 128}" for c in range(128)],
        core_id=lambda cpu: cpu % 64,
        pcie={
            f"pci0000:{32 * n:02x}": cpus(span(16 * n, 16), span(128 + 16 * n, 16))
            for n in range(8)
        },
    ),
    # P-core threads adjacent (0-15), then the E-cores 16-23.
    "intel-hybrid": Expected(
        summary=summary(24, 16, 1, 1, 1, True),
        online="0-23",
        sockets={0: "0-23"},
        numa={0: "0-23"},
        l3={0: "0-23"},
        cores=[f"{2 * c}-{2 * c + 1}" for c in range(8)] + [str(c) for c in range(16, 24)],
        core_id=lambda cpu: 4 * (cpu // 2) if cpu < 16 else 32 + cpu - 16,
        core_types={"p-core": "0-15", "e-core": "16-23"},
    ),
    # core_id restarts in every cluster of 4, so only (socket, cluster, core) is an identity;
    # the L3 has no id file and is named after its lowest CPU.
    "arm-clusters": Expected(
        summary=summary(32, 32, 2, 1, 2, False),
        online="0-31",
        sockets={0: "0-31"},
        numa={0: "0-15", 1: "16-31"},
        l3={0: "0-15", 16: "16-31"},
        cores=[str(c) for c in range(32)],
        core_id=lambda cpu: cpu % 4,
        clusters={k: span(4 * k, 4) for k in range(8)},
        smt_control="notsupported",
    ),
    "smt4": Expected(
        summary=summary(32, 8, 1, 1, 1, True),
        online="0-31",
        sockets={0: "0-31"},
        numa={0: "0-31"},
        l3={0: "0-31"},
        cores=[span(4 * c, 4) for c in range(8)],
        core_id=lambda cpu: cpu // 4,
    ),
    # No L3, no cluster_id, no NUMA directories: everything on node 0.
    "small-vm": Expected(
        summary=summary(2, 2, 0, 1, 1, False),
        online="0-1",
        sockets={0: "0-1"},
        numa={0: "0-1"},
        l3={},
        cores=["0", "1"],
        core_id=lambda cpu: cpu,
        smt_control="notsupported",
    ),
    # CPUs 4, 5, 9 offline: cores 1, 4, 5 keep one thread each.
    "offline-middle": Expected(
        summary=summary(13, 8, 1, 1, 1, True),
        online=OFFLINE_MIDDLE_ONLINE,
        sockets={0: OFFLINE_MIDDLE_ONLINE},
        numa={0: OFFLINE_MIDDLE_ONLINE},
        l3={0: OFFLINE_MIDDLE_ONLINE},
        cores=["0,8", "1", "2,10", "3,11", "12", "13", "6,14", "7,15"],
        core_id=lambda cpu: cpu % 8,
    ),
    # Isolation lists name CPUs by id; discovery takes them as written.
    "isolated-rt": Expected(
        summary=summary(16, 8, 1, 1, 1, True),
        online="0-15",
        sockets={0: "0-15"},
        numa={0: "0-15"},
        l3={0: "0-15"},
        cores=[f"{c},{c + 8}" for c in range(8)],
        core_id=lambda cpu: cpu % 8,
        isolated="2-3,6,10-11,14",
        nohz_full="2-3,6,10-11,14",
    ),
    "isolated-2numa": Expected(
        summary=summary(16, 8, 2, 2, 2, True),
        online="0-15",
        sockets={0: "0-3,8-11", 1: "4-7,12-15"},
        numa={0: "0-3,8-11", 1: "4-7,12-15"},
        l3={0: "0-3,8-11", 1: "4-7,12-15"},
        cores=[f"{c},{c + 8}" for c in range(8)],
        core_id=lambda cpu: cpu % 4,
        isolated="5-7,13-15",
        nohz_full="6-7,14-15",
    ),
    # No nohz_full file at all: a kernel built without NO_HZ_FULL.
    "isolated-all": Expected(
        summary=summary(2, 2, 0, 1, 1, False),
        online="0-1",
        sockets={0: "0-1"},
        numa={0: "0-1"},
        l3={},
        cores=["0", "1"],
        core_id=lambda cpu: cpu,
        smt_control="notsupported",
        isolated="0-1",
    ),
    # Two NUMA nodes of 8 cores per socket share the socket's L3.
    "snc": Expected(
        summary=summary(64, 32, 2, 2, 4, True),
        online="0-63",
        sockets={s: cpus(span(16 * s, 16), span(32 + 16 * s, 16)) for s in range(2)},
        numa={n: cpus(span(8 * n, 8), span(32 + 8 * n, 8)) for n in range(4)},
        l3={s: cpus(span(16 * s, 16), span(32 + 16 * s, 16)) for s in range(2)},
        cores=[f"{c},{c + 32}" for c in range(32)],
        core_id=lambda cpu: cpu % 16,
        pcie={"pci0000:00": "0-7,32-39", "pci0000:80": "16-23,48-55"},
    ),
    # Two NUMA nodes of 4 cores per socket; each node its own memory and pools, the 1 GiB
    # size only on nodes 0 and 2 (as written by hand: GiB, MiB and pages).
    "numa4-hugepages": Expected(
        summary=summary(32, 16, 2, 2, 4, True),
        online="0-31",
        sockets={s: cpus(span(8 * s, 8), span(16 + 8 * s, 8)) for s in range(2)},
        numa={n: cpus(span(4 * n, 4), span(16 + 4 * n, 4)) for n in range(4)},
        l3={s: cpus(span(8 * s, 8), span(16 + 8 * s, 8)) for s in range(2)},
        cores=[f"{c},{c + 16}" for c in range(16)],
        core_id=lambda cpu: cpu % 8,
        memory={
            0: (16 << 20, {2048: (512, 500), 1 << 20: (2, 2)}),
            1: (8 << 20, {2048: (256, 256)}),
            2: ((16 << 20) - 4096, {2048: (0, 0), 1 << 20: (4, 3)}),
            3: (12 << 20, {2048: (1024, 1000)}),
        },
    ),
    "big-1024": Expected(
        summary=summary(1024, 512, 64, 2, 8, True),
        online="0-1023",
        sockets={s: cpus(span(256 * s, 256), span(512 + 256 * s, 256)) for s in range(2)},
        numa={n: cpus(span(64 * n, 64), span(512 + 64 * n, 64)) for n in range(8)},
        l3={k: cpus(span(8 * k, 8), span(512 + 8 * k, 8)) for k in range(64)},
        cores=[f"{c},{c + 512}" for c in range(512)],
        core_id=lambda cpu: cpu % 256,
        pcie={f"pci{n:04x}:00": cpus(span(64 * n, 64), span(512 + 64 * n, 64)) for n in range(8)},
    ),
}


def test_every_fixture_has_an_expectation() -> None:
    assert set(EXPECTED) == set(FIXTURES)


@pytest.fixture(scope="module")
def machines(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Machine]:
    base = tmp_path_factory.mktemp("fixtures")
    return {name: discover(write_fixture(name, base / name)) for name in FIXTURES}


def owners(groups: dict[int, str]) -> dict[int, int]:
    """CPU -> the key of the group holding it (CPUs in no group are absent)."""
    result: dict[int, int] = {}
    for key, members in groups.items():
        for cpu in CPUSet.parse(members):
            assert cpu not in result, f"cpu {cpu} in groups {result[cpu]} and {key}"
            result[cpu] = key
    return result


@pytest.mark.parametrize("name", list(EXPECTED))
def test_full_inventory(name: str, machines: dict[str, Machine]) -> None:
    machine, want = machines[name], EXPECTED[name]
    assert machine.summary() == want.summary
    assert machine.online.format() == want.online
    assert machine.cpu_set.format() == want.online
    assert machine.skipped == ()
    assert machine.smt_control == want.smt_control
    assert machine.isolated.format() == want.isolated
    assert machine.nohz_full.format() == want.nohz_full
    assert {k: v.format() for k, v in machine.sockets.items()} == want.sockets
    assert {k: v.format() for k, v in machine.numa_nodes.items()} == want.numa
    caches = {k: v.format() for k, v in machine.uncore_caches.items() if k >= 0}
    assert caches == want.l3
    assert sorted(s.format() for s in machine.cores.values()) == sorted(want.cores)

    core_of = {cpu: CPUSet.parse(core) for core in want.cores for cpu in CPUSet.parse(core)}
    types = want.core_types or {"standard": want.online}
    type_of = {cpu: kind for kind, members in types.items() for cpu in CPUSet.parse(members)}
    socket_of, node_of = owners(want.sockets), owners(want.numa)
    l3_of, cluster_of = owners(want.l3), owners(want.clusters)
    roots_of: dict[int, list[str]] = {}
    for root in sorted(want.pcie):
        for cpu_id in CPUSet.parse(want.pcie[root]):
            roots_of.setdefault(cpu_id, []).append(root)
    for cpu in machine.cpus:
        where = f"cpu {cpu.cpu_id}"
        assert cpu.socket_id == socket_of[cpu.cpu_id], where
        assert cpu.numa_node_id == node_of[cpu.cpu_id], where
        assert cpu.numa_node_cpus.format() == want.numa[cpu.numa_node_id], where
        assert cpu.uncore_cache_id == l3_of.get(cpu.cpu_id, -1), where
        assert cpu.cluster_id == cluster_of.get(cpu.cpu_id, -1), where
        assert cpu.core_id == want.core_id(cpu.cpu_id), where
        assert cpu.siblings == core_of[cpu.cpu_id], where
        assert cpu.core_type == type_of[cpu.cpu_id], where
        assert list(cpu.pcie_roots) == roots_of.get(cpu.cpu_id, []), where
    memory = {
        m.node: (m.mem_total_kib, {p.size_kib: (p.total, p.free) for p in m.hugepages})
        for m in machine.memory
    }
    if want.memory:
        assert memory == want.memory
        assert all(m.problems == () for m in machine.memory)
    else:
        # A tree without memory files: each node directory's MemTotal absent, and said why.
        assert set(memory) <= set(want.numa)
        for node in machine.memory:
            assert (node.mem_total_kib, node.hugepages) == (None, ())
            assert node.problems == (f"devices/system/node/node{node.node}/meminfo: missing",)


@pytest.mark.parametrize("name", list(EXPECTED))
def test_report_and_proto_replay_the_same_machine(name: str, machines: dict[str, Machine]) -> None:
    machine = machines[name]
    from_report = Machine.from_report(
        {
            "sysfsRoot": machine.sysfs_root,
            "cpuDetails": {
                "cpus": machine.to_report_cpus(),
                "online": machine.online.format(),
                "smtControl": machine.smt_control,
                "isolated": machine.isolated.format(),
                "nohzFull": machine.nohz_full.format(),
            },
            "memory": [node.to_report() for node in machine.memory],
        }
    )
    from_proto = Machine.from_proto(machine.to_proto())
    for replay in (from_report, from_proto):
        assert replay.to_report_cpus() == machine.to_report_cpus()
        assert replay.fingerprint == machine.fingerprint
        assert replay.smt_control == machine.smt_control
        assert (replay.isolated, replay.nohz_full) == (machine.isolated, machine.nohz_full)
        assert replay.memory == machine.memory
        assert memory_fingerprint(replay.memory) == memory_fingerprint(machine.memory)


def test_fingerprints_tell_fixtures_apart(machines: dict[str, Machine]) -> None:
    prints = {m.fingerprint for m in machines.values()}
    assert len(prints) == len(machines)


def test_fingerprint_is_the_digest_of_the_report(machines: dict[str, Machine]) -> None:
    # Hashed CPU by CPU, it must stay the digest of the whole report's JSON text that earlier
    # releases computed, or every node would look changed after an upgrade.
    for machine in machines.values():
        digest = hashlib.sha256(
            json.dumps(machine.to_report_cpus(), sort_keys=True).encode()
            + machine.online.format().encode()
        )
        if machine.isolated or machine.nohz_full:
            digest.update(f"|{machine.isolated.format()}|{machine.nohz_full.format()}".encode())
        assert machine.fingerprint == digest.hexdigest()[:16]


def test_fixture_directory_must_be_empty(tmp_path: Path) -> None:
    write_fixture("small-vm", tmp_path)
    with pytest.raises(FileExistsError):
        write_fixture("small-vm", tmp_path)


def test_unknown_fixture_name_lists_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(KeyError, match="xeon-2s-ht"):
        write_fixture("no-such-machine", tmp_path)


def test_files_use_the_kernel_formats(tmp_path: Path) -> None:
    root = write_fixture("xeon-2s-ht", tmp_path)
    cpu12 = root / "devices/system/cpu/cpu12"
    assert (cpu12 / "topology/thread_siblings_list").read_text() == "12,32\n"
    # Bitmaps are 32-bit hex words, most significant first.
    assert (cpu12 / "topology/thread_siblings").read_text() == "00000001,00001000\n"
    assert (root / "devices/system/cpu/online").read_text() == "0-39\n"
    affinity = root / "devices/pci0000:80/pci_bus/0000:80/cpulistaffinity"
    assert affinity.read_text() == "10-19,30-39\n"
    assert os.readlink(cpu12 / "node1") == "../../node/node1"


def test_offline_cpus_keep_only_their_online_file(tmp_path: Path) -> None:
    root = write_fixture("offline-middle", tmp_path)
    cpu4 = root / "devices/system/cpu/cpu4"
    assert (cpu4 / "online").read_text() == "0\n"
    assert not (cpu4 / "topology").exists()
    assert (root / "devices/system/cpu/offline").read_text() == "4-5,9\n"
