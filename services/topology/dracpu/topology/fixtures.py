"""Synthetic sysfs trees built from compact machine descriptions.

`write_fixture("xeon-2s-ht", tmp)` lays out `tmp/devices/system/cpu/...` the way the kernel would
under /sys for that machine, so discovery, the services and the dev runner can run on topologies
this host does not have (`--sysfs-root tmp`).

Numbering follows what real kernels do: Intel servers number the first thread of every core,
then the second threads ("split": siblings n / n+N); AMD EPYC does the same per system; POWER,
ARM and Intel hybrid client parts number the threads of a core adjacently.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from dracpu.core.cli import ArgumentParser
from dracpu.core.cpuset import CPUSet

Numbering = Literal["split", "adjacent"]
ClusterFile = Literal["absent", "65535"]
AffinityFile = Literal["cpulistaffinity", "local_cpulist"]


@dataclass(frozen=True)
class PCIeRootSpec:
    """A PCIe host bridge `devices/<name>` local to one NUMA node (None: to every CPU)."""

    name: str
    numa_node: int | None
    # Where the locality is published: the root bus's cpulistaffinity, or only the
    # local_cpulist of the first device below the bridge.
    source: AffinityFile = "cpulistaffinity"


@dataclass(frozen=True)
class NodeMemorySpec:
    """A NUMA node's memory: MemTotal in KiB and its hugepage pools as
    (page size in KiB, nr_hugepages, free_hugepages)."""

    mem_total_kib: int
    hugepages: tuple[tuple[int, int, int], ...] = ()


@dataclass(frozen=True)
class MachineSpec:
    """A machine in a few numbers. Cores of a socket are numbered 0..n-1 in order; NUMA nodes,
    L3 domains and clusters are consecutive runs of those cores, so they nest either way
    (NPS4: several L3 per node; SNC: several nodes per L3)."""

    description: str
    sockets: int = 1
    cores_per_socket: int = 4
    threads_per_core: int = 1
    numa_per_socket: int = 1
    # Cores sharing one L3; 0 means one L3 per socket.
    cores_per_l3: int = 0
    has_l3: bool = True
    l3_has_id: bool = True
    # Cores per cluster; 0 means no clusters (cluster_file says how the kernel shows that).
    cores_per_cluster: int = 0
    cluster_file: ClusterFile = "65535"
    numbering: Numbering = "split"
    # Explicit core_id of each core of a socket (Intel leaves gaps); default 0..n-1, or the index
    # within the cluster when there are clusters.
    core_ids: tuple[int, ...] | None = None
    # Intel hybrid: single-threaded E-cores after the P-cores of each socket.
    e_cores_per_socket: int = 0
    offline: tuple[int, ...] = ()
    # False: a kernel without NUMA support (no node dirs anywhere).
    numa_dirs: bool = True
    smt_control: str | None = "on"
    pcie_roots: tuple[PCIeRootSpec, ...] = ()
    # Kernel CPU isolation (isolcpus= / nohz_full=); None: the kernel has no such file.
    isolated: tuple[int, ...] | None = ()
    nohz_full: tuple[int, ...] | None = ()
    # Each NUMA node's meminfo and hugepage pools, in node order; () writes none (a tree
    # without memory files, as the CPU-only fixtures were).
    memory: tuple[NodeMemorySpec, ...] = ()

    @property
    def num_numa_nodes(self) -> int:
        return self.sockets * self.numa_per_socket

    def layout(self) -> list[FixtureCPU]:
        """Every CPU of the machine (offline ones included), ascending by id."""
        return _layout(self)


@dataclass(frozen=True)
class FixtureCPU:
    """The facts the generator writes for one logical CPU."""

    cpu_id: int
    socket: int
    core_index: int  # node-wide, in socket/core order
    core_id: int
    cluster_id: int  # -1: none
    numa_node: int
    l3_index: int  # -1: no L3
    thread: int
    e_core: bool
    online: bool = True
    siblings: tuple[int, ...] = field(default=())


def _layout(spec: MachineSpec) -> list[FixtureCPU]:
    cores_in_socket = spec.cores_per_socket + spec.e_cores_per_socket
    if spec.numa_per_socket < 1 or cores_in_socket % spec.numa_per_socket:
        raise ValueError(f"{spec.description}: cores per socket must split evenly into nodes")
    per_node = cores_in_socket // spec.numa_per_socket
    per_l3 = spec.cores_per_l3 or cores_in_socket
    l3_per_socket = -(-cores_in_socket // per_l3)
    clusters_per_socket = (
        -(-cores_in_socket // spec.cores_per_cluster) if spec.cores_per_cluster else 0
    )
    if spec.core_ids is not None and len(spec.core_ids) != cores_in_socket:
        raise ValueError(f"{spec.description}: core_ids must name every core of a socket")

    # (socket, index in socket, threads) for every core, socket-major.
    cores = [
        (socket, index, spec.threads_per_core if index < spec.cores_per_socket else 1)
        for socket in range(spec.sockets)
        for index in range(cores_in_socket)
    ]
    numbers: dict[tuple[int, int], list[int]] = {}
    if spec.numbering == "split":
        next_id = 0
        for thread in range(max(t for _, _, t in cores)):
            for socket, index, threads in cores:
                if thread < threads:
                    numbers.setdefault((socket, index), []).append(next_id)
                    next_id += 1
    else:
        next_id = 0
        for socket, index, threads in cores:
            numbers[(socket, index)] = list(range(next_id, next_id + threads))
            next_id += threads

    offline = set(spec.offline)
    result: list[FixtureCPU] = []
    for core_index, (socket, index, _) in enumerate(cores):
        ids = numbers[(socket, index)]
        if spec.cores_per_cluster:
            cluster = socket * clusters_per_socket + index // spec.cores_per_cluster
            default_core_id = index % spec.cores_per_cluster
        else:
            cluster = -1
            default_core_id = index
        online_threads = tuple(i for i in ids if i not in offline)
        for thread, cpu_id in enumerate(ids):
            result.append(
                FixtureCPU(
                    cpu_id=cpu_id,
                    socket=socket,
                    core_index=core_index,
                    core_id=spec.core_ids[index] if spec.core_ids else default_core_id,
                    cluster_id=cluster,
                    numa_node=socket * spec.numa_per_socket + index // per_node,
                    l3_index=socket * l3_per_socket + index // per_l3 if spec.has_l3 else -1,
                    thread=thread,
                    e_core=index >= spec.cores_per_socket,
                    online=cpu_id not in offline,
                    siblings=online_threads,
                )
            )
    result.sort(key=lambda c: c.cpu_id)
    return result


# ---- writing the tree ------------------------------------------------------------------------


class _Tree:
    """Writes files below a root, creating directories on the way."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._made: set[Path] = set()

    def write(self, relative: str, content: str) -> None:
        path = self.root / relative
        parent = path.parent
        if parent not in self._made:
            parent.mkdir(parents=True, exist_ok=True)
            self._made.add(parent)
        path.write_text(content + "\n", encoding="ascii")

    def symlink(self, relative: str, target: str) -> None:
        path = self.root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.symlink_to(target)


def _hexmask(cpus: CPUSet) -> str:
    """The kernel's bitmap format: 32-bit hex words, most significant first, comma-separated."""
    words = []
    mask = cpus.mask
    while True:
        words.append(f"{mask & 0xFFFFFFFF:08x}")
        mask >>= 32
        if not mask:
            break
    return ",".join(reversed(words))


def _write_cpu(
    tree: _Tree,
    spec: MachineSpec,
    cpu: FixtureCPU,
    cluster_cpus: CPUSet,
    l3_cpus: CPUSet,
    l3_id: int,
) -> None:
    base = f"devices/system/cpu/cpu{cpu.cpu_id}"
    if cpu.cpu_id != 0:
        tree.write(f"{base}/online", "1" if cpu.online else "0")
    if spec.numa_dirs:
        tree.symlink(f"{base}/node{cpu.numa_node}", f"../../node/node{cpu.numa_node}")
    if not cpu.online:
        # The kernel removes topology and cache directories of an offline CPU.
        return
    siblings = CPUSet(cpu.siblings)
    topo = f"{base}/topology"
    # Only the files discovery reads, plus the thread mask: a big machine is tens of
    # thousands of files already.
    tree.write(f"{topo}/physical_package_id", str(cpu.socket))
    tree.write(f"{topo}/core_id", str(cpu.core_id))
    if spec.cores_per_cluster:
        tree.write(f"{topo}/cluster_id", str(cpu.cluster_id))
        tree.write(f"{topo}/cluster_cpus_list", cluster_cpus.format())
    elif spec.cluster_file == "65535":
        tree.write(f"{topo}/cluster_id", "65535")
    tree.write(f"{topo}/thread_siblings_list", siblings.format())
    tree.write(f"{topo}/thread_siblings", _hexmask(siblings))
    # index0-2: L1 data, L1 instruction, L2 (per cluster when there are clusters).
    caches = [(1, siblings, cpu.core_index), (1, siblings, cpu.core_index)]
    caches.append((2, cluster_cpus or siblings, cpu.core_index))
    if cpu.l3_index >= 0:
        caches.append((3, l3_cpus, l3_id))
    for index, (level, shared, cache_id) in enumerate(caches):
        cache = f"{base}/cache/index{index}"
        tree.write(f"{cache}/level", str(level))
        tree.write(f"{cache}/shared_cpu_list", shared.format())
        if level < 3 or spec.l3_has_id:
            tree.write(f"{cache}/id", str(cache_id))


def _write_memory(tree: _Tree, node: int, memory: NodeMemorySpec) -> None:
    """The node's meminfo (its first lines, as the kernel prints them) and hugepage pools."""
    base = f"devices/system/node/node{node}"
    hugepage_kib = sum(size * total for size, total, _ in memory.hugepages)
    free_kib = max(0, memory.mem_total_kib - hugepage_kib) // 2
    lines = [
        ("MemTotal", memory.mem_total_kib),
        ("MemFree", free_kib),
        ("MemUsed", memory.mem_total_kib - free_kib),
    ]
    tree.write(
        f"{base}/meminfo",
        "\n".join(f"Node {node} {name + ':':<15} {kib:>8} kB" for name, kib in lines),
    )
    for size, total, free in memory.hugepages:
        pool = f"{base}/hugepages/hugepages-{size}kB"
        tree.write(f"{pool}/nr_hugepages", str(total))
        tree.write(f"{pool}/free_hugepages", str(free))
        tree.write(f"{pool}/surplus_hugepages", "0")


def write_spec(spec: MachineSpec, root: Path) -> Path:
    """Write the sysfs tree of `spec` into `root` (absent or empty); return `root`."""
    sysfs = Path(root)
    if sysfs.exists() and any(sysfs.iterdir()):
        raise FileExistsError(f"fixture directory {sysfs} is not empty")
    tree = _Tree(sysfs)
    cpus = spec.layout()
    online = [c for c in cpus if c.online]

    def group(key: str) -> dict[int, CPUSet]:
        members: dict[int, list[int]] = {}
        for cpu in online:
            members.setdefault(getattr(cpu, key), []).append(cpu.cpu_id)
        return {k: CPUSet(v) for k, v in members.items()}

    nodes, l3s, clusters = group("numa_node"), group("l3_index"), group("cluster_id")
    # L3 ids: x86 numbers them system-wide; without an id file discovery falls back to the
    # lowest CPU sharing the cache.
    for cpu in cpus:
        _write_cpu(
            tree,
            spec,
            cpu,
            clusters.get(cpu.cluster_id, CPUSet()) if spec.cores_per_cluster else CPUSet(),
            l3s.get(cpu.l3_index, CPUSet()),
            cpu.l3_index,
        )

    all_ids = CPUSet(c.cpu_id for c in cpus)
    online_set = CPUSet(c.cpu_id for c in online)
    cpu_dir = "devices/system/cpu"
    tree.write(f"{cpu_dir}/online", online_set.format())
    tree.write(f"{cpu_dir}/offline", (all_ids - online_set).format())
    tree.write(f"{cpu_dir}/possible", all_ids.format())
    tree.write(f"{cpu_dir}/present", all_ids.format())
    tree.write(f"{cpu_dir}/kernel_max", "8191")
    if spec.isolated is not None:
        tree.write(f"{cpu_dir}/isolated", CPUSet(spec.isolated).format())
    if spec.nohz_full is not None:
        # Kernels before 5.x print "(null)" for an empty nohz_full mask.
        tree.write(f"{cpu_dir}/nohz_full", CPUSet(spec.nohz_full).format() or "(null)")
    if spec.smt_control is not None:
        tree.write(f"{cpu_dir}/smt/control", spec.smt_control)
        tree.write(f"{cpu_dir}/smt/active", "1" if spec.threads_per_core > 1 else "0")

    if spec.numa_dirs:
        for node in range(spec.num_numa_nodes):
            tree.write(
                f"devices/system/node/node{node}/cpulist", nodes.get(node, CPUSet()).format()
            )
        node_ids = CPUSet(range(spec.num_numa_nodes)).format()
        tree.write("devices/system/node/online", node_ids)
        tree.write("devices/system/node/possible", node_ids)
        for node, memory in enumerate(spec.memory):
            _write_memory(tree, node, memory)

    if spec.e_cores_per_socket:
        e_cores = CPUSet(c.cpu_id for c in online if c.e_core)
        tree.write("devices/cpu_core/cpus", (online_set - e_cores).format())
        tree.write("devices/cpu_atom/cpus", e_cores.format())

    for root_spec in spec.pcie_roots:
        local = online_set if root_spec.numa_node is None else nodes[root_spec.numa_node]
        bus = root_spec.name.removeprefix("pci")
        base = f"devices/{root_spec.name}"
        if root_spec.source == "cpulistaffinity":
            tree.write(f"{base}/pci_bus/{bus}/cpulistaffinity", local.format())
            tree.write(f"{base}/pci_bus/{bus}/cpuaffinity", _hexmask(local))
        else:
            tree.write(f"{base}/{bus}:00.0/local_cpulist", local.format())
        tree.write(f"{base}/{bus}:00.0/vendor", "0x8086")
    return sysfs


# ---- the named machines ----------------------------------------------------------------------


def _roots(
    *pairs: tuple[str, int | None], source: AffinityFile = "cpulistaffinity"
) -> tuple[PCIeRootSpec, ...]:
    return tuple(PCIeRootSpec(name, node, source) for name, node in pairs)


FIXTURES: dict[str, MachineSpec] = {
    "single-4c8t": MachineSpec(
        "1 socket, 4 cores, 8 threads (siblings n / n+4)",
        cores_per_socket=4,
        threads_per_core=2,
        pcie_roots=_roots(("pci0000:00", None)),
    ),
    "xeon-2s-ht": MachineSpec(
        "2-socket Xeon, 10 cores per socket with HT, siblings n / n+20, core ids with gaps",
        sockets=2,
        cores_per_socket=10,
        threads_per_core=2,
        core_ids=(0, 1, 2, 3, 4, 8, 9, 10, 11, 12),
        pcie_roots=_roots(
            ("pci0000:00", 0), ("pci0000:3a", 0), ("pci0000:80", 1), ("pci0000:ae", 1)
        ),
    ),
    "epyc-2s-nps4": MachineSpec(
        "2-socket EPYC, 64 cores per socket, NPS4 (8 NUMA nodes), one L3 per 8-core CCD, SMT",
        sockets=2,
        cores_per_socket=64,
        threads_per_core=2,
        numa_per_socket=4,
        cores_per_l3=8,
        pcie_roots=_roots(
            *((f"pci0000:{bus:02x}", node) for node, bus in enumerate(range(0, 256, 32))),
            source="local_cpulist",
        ),
    ),
    "intel-hybrid": MachineSpec(
        "Intel hybrid: 8 P-cores with SMT + 8 E-cores without, threads numbered adjacently",
        cores_per_socket=8,
        threads_per_core=2,
        e_cores_per_socket=8,
        numbering="adjacent",
        core_ids=(0, 4, 8, 12, 16, 20, 24, 28, 32, 33, 34, 35, 36, 37, 38, 39),
    ),
    "arm-clusters": MachineSpec(
        "ARM server: 32 cores in clusters of 4, 2 NUMA nodes, L3 per node without id, no SMT",
        cores_per_socket=32,
        numa_per_socket=2,
        cores_per_l3=16,
        l3_has_id=False,
        cores_per_cluster=4,
        numbering="adjacent",
        smt_control="notsupported",
    ),
    "smt4": MachineSpec(
        "1 socket, 8 cores with 4-way SMT, threads numbered adjacently",
        cores_per_socket=8,
        threads_per_core=4,
        numbering="adjacent",
    ),
    "small-vm": MachineSpec(
        "small VM: 2 CPUs, no SMT, no cluster_id, no L3, no NUMA directories",
        cores_per_socket=2,
        has_l3=False,
        cluster_file="absent",
        numa_dirs=False,
        smt_control="notsupported",
    ),
    "offline-middle": MachineSpec(
        "1 socket, 8 cores with HT (siblings n / n+8), CPUs 4, 5 and 9 offline",
        cores_per_socket=8,
        threads_per_core=2,
        offline=(4, 5, 9),
    ),
    "snc": MachineSpec(
        "2-socket Xeon with sub-NUMA clustering: 2 NUMA nodes per socket share the socket's L3",
        sockets=2,
        cores_per_socket=16,
        threads_per_core=2,
        numa_per_socket=2,
        pcie_roots=_roots(("pci0000:00", 0), ("pci0000:80", 2)),
    ),
    "isolated-rt": MachineSpec(
        "1 socket, 8 cores with HT (siblings n / n+8); cores 2, 3 and 6 isolated and nohz_full",
        cores_per_socket=8,
        threads_per_core=2,
        isolated=(2, 3, 6, 10, 11, 14),
        nohz_full=(2, 3, 6, 10, 11, 14),
    ),
    "isolated-2numa": MachineSpec(
        "2 sockets x 4 cores with HT, one NUMA node each; isolated CPUs only on node 1, "
        "nohz_full on a subset of them",
        sockets=2,
        cores_per_socket=4,
        threads_per_core=2,
        isolated=(5, 6, 7, 13, 14, 15),
        nohz_full=(6, 7, 14, 15),
    ),
    "isolated-all": MachineSpec(
        "small VM: 2 CPUs, both isolated (shared containers have nowhere else to go)",
        cores_per_socket=2,
        has_l3=False,
        smt_control="notsupported",
        isolated=(0, 1),
        nohz_full=None,
    ),
    "numa4-hugepages": MachineSpec(
        "2 sockets x 2 NUMA nodes of 4 cores with HT; each node with its own memory and 2 MiB "
        "pool, 1 GiB pools on nodes 0 and 2 only",
        sockets=2,
        cores_per_socket=8,
        threads_per_core=2,
        numa_per_socket=2,
        memory=(
            NodeMemorySpec(16 * 1024 * 1024, ((2048, 512, 500), (1048576, 2, 2))),
            NodeMemorySpec(8 * 1024 * 1024, ((2048, 256, 256),)),
            NodeMemorySpec(16 * 1024 * 1024 - 4096, ((2048, 0, 0), (1048576, 4, 3))),
            NodeMemorySpec(12 * 1024 * 1024, ((2048, 1024, 1000),)),
        ),
    ),
    "big-1024": MachineSpec(
        "1024 CPUs: 2 sockets x 256 cores with SMT, 8 NUMA nodes, L3 per 8 cores",
        sockets=2,
        cores_per_socket=256,
        threads_per_core=2,
        numa_per_socket=4,
        cores_per_l3=8,
        pcie_roots=_roots(*((f"pci{node:04x}:00", node) for node in range(8))),
    ),
}


def write_fixture(name_or_spec: str | MachineSpec, root: Path) -> Path:
    """Write a named fixture (or a spec) into `root`; return the sysfs root, `root` itself."""
    if isinstance(name_or_spec, MachineSpec):
        spec = name_or_spec
    else:
        try:
            spec = FIXTURES[name_or_spec]
        except KeyError:
            known = ", ".join(FIXTURES)
            raise KeyError(f"unknown fixture {name_or_spec!r}; known: {known}") from None
    return write_spec(spec, root)


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m dracpu.topology.fixtures NAME DIR`: write a fixture, print its sysfs root."""
    parser = ArgumentParser(prog="python -m dracpu.topology.fixtures")
    parser.add_argument("name", nargs="?", choices=sorted(FIXTURES), metavar="NAME")
    parser.add_argument("directory", nargs="?", metavar="DIR")
    parser.add_argument("--list", action="store_true", help="list the fixtures")
    args = parser.parse_args(argv)
    if args.list or args.name is None:
        for name, spec in FIXTURES.items():
            print(f"{name:<16} {spec.description}")
        return 0
    if args.directory is None:
        parser.error("DIR is required")
    try:
        print(write_fixture(args.name, Path(os.path.abspath(args.directory))))
    except OSError as exc:
        parser.error(str(exc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
