"""CPU topology discovery from a sysfs tree.

Facts per online CPU, as the reference driver reads them (pkg/cpuinfo, pkg/pcie): socket
(`physical_package_id`), cluster (`cluster_id`, 65535 = none), `core_id`, NUMA node (the `nodeN`
entry in the CPU's directory), the L3 ("uncore") cache, the core type of Intel hybrid parts and
the PCIe host bridges local to the CPU. Node-wide: the kernel's isolated and nohz_full CPU lists,
and each NUMA node's memory (dracpu.topology.memory). A CPU whose socket or core cannot be read
is skipped with a reason; no file's contents can make discovery crash.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from dracpu.core.cpuset import CPUSet
from dracpu.core.errors import CPUSetError, TopologyError
from dracpu.core.log import get_logger
from dracpu.core.machine import CPUInfo, Machine
from dracpu.topology.memory import NODE_DIR, discover_memory
from dracpu.topology.overlay import SysfsOverlay
from dracpu.topology.sysfs import Missing, SysfsReader

log = get_logger(__name__)

CPU_DIR = "devices/system/cpu"
# The kernel prints 16-bit -1 for "no cluster" (Documentation/admin-guide/cputopology.rst).
NO_CLUSTER = 65535
# Host bridge names, from the kernel's "pci%04x:%02x".
_PCIE_ROOT = re.compile(r"^pci[0-9a-f]{4}:[0-9a-f]{2}$")
_CPU_ENTRY = re.compile(r"^cpu(\d+)$")
_NODE_ENTRY = re.compile(r"^node(\d+)$")
_CACHE_ENTRY = re.compile(r"^index(\d+)$")


class Skip(Exception):
    """A CPU whose topology is incomplete; the message says why."""


@dataclass
class _Scan:
    """What discovery has learnt so far; lets CPUs that share a cache or a core reuse reads."""

    reader: SysfsReader
    node_cpus: dict[int, CPUSet] = field(default_factory=dict)
    l3_of: dict[int, int] = field(default_factory=dict)
    thread_groups: dict[int, CPUSet] = field(default_factory=dict)
    e_cores: CPUSet | None = None
    p_cores: CPUSet | None = None


def check_root(root: Path) -> None:
    """Refuse a root that cannot be a sysfs tree, with a message naming the problem."""
    if not root.exists():
        raise TopologyError(f"sysfs root {root} does not exist")
    if not root.is_dir():
        raise TopologyError(f"sysfs root {root} is not a directory")
    try:
        os.listdir(root)
    except OSError as exc:
        raise TopologyError(f"cannot read sysfs root {root}: {exc.strerror or exc}") from None
    cpu_dir = root / CPU_DIR
    if not cpu_dir.is_dir():
        raise TopologyError(f"{root} is not a sysfs tree: {CPU_DIR} is missing")
    try:
        os.listdir(cpu_dir)
    except OSError as exc:
        raise TopologyError(f"cannot read {cpu_dir}: {exc.strerror or exc}") from None


def discover(sysfs_root: str | os.PathLike[str], overlay: SysfsOverlay | None = None) -> Machine:
    """The Machine described by the sysfs tree at `sysfs_root`, with `overlay` over it."""
    started = time.perf_counter()
    root = Path(sysfs_root)
    check_root(root)
    scan = _Scan(SysfsReader(root, overlay))
    online = _online_cpus(scan.reader)
    _read_core_types(scan)

    roots = _pcie_roots(scan.reader)
    cpus: list[CPUInfo] = []
    skipped: list[str] = []
    for cpu_id in online:
        try:
            local_roots = tuple(name for name, local in roots.items() if cpu_id in local)
            cpus.append(_read_cpu(scan, cpu_id, local_roots))
        except Skip as exc:
            skipped.append(f"cpu {cpu_id}: {exc}")
            log.warning("skipping CPU with incomplete topology", cpu=cpu_id, reason=str(exc))
    if not cpus:
        detail = f"; {skipped[0]}" if skipped else ""
        raise TopologyError(f"no CPU under {root} has a complete topology{detail}")

    smt_control = scan.reader.text(f"{CPU_DIR}/smt/control")
    machine = Machine.build(
        cpus,
        online,
        smt_control="" if isinstance(smt_control, Missing) else smt_control,
        skipped=skipped,
        sysfs_root=str(root),
        isolated=read_isolation(scan.reader, "isolated"),
        nohz_full=read_isolation(scan.reader, "nohz_full"),
        memory=discover_memory(scan.reader),
    )
    _check_siblings(machine, scan.thread_groups)
    log.info(
        2,
        "topology discovered",
        root=str(root),
        cpus=len(machine.cpus),
        cores=len(machine.cores),
        sockets=len(machine.sockets),
        numa_nodes=len(machine.numa_nodes),
        skipped=len(skipped),
        isolated=machine.isolated.format(),
        nohz_full=machine.nohz_full.format(),
        memory_nodes=len(machine.memory),
        fingerprint=machine.fingerprint,
        ms=round((time.perf_counter() - started) * 1000, 1),
    )
    return machine


def _online_cpus(reader: SysfsReader) -> CPUSet:
    online = reader.cpuset(f"{CPU_DIR}/online")
    if not isinstance(online, Missing) and online:
        return online
    # Without a usable `online` list, a cpuN directory is online unless its `online` says 0.
    log.warning("cannot use the online CPU list; scanning cpu directories", reason=str(online))
    entries = reader.listdir(CPU_DIR)
    found: list[int] = []
    for name in [] if isinstance(entries, Missing) else entries:
        match = _CPU_ENTRY.match(name)
        if match and reader.text(f"{CPU_DIR}/{name}/online") != "0":
            found.append(int(match.group(1)))
    if not found:
        raise TopologyError(f"no online CPUs under {reader.root}: {online}")
    return CPUSet(found)


def read_isolation(reader: SysfsReader, name: str) -> CPUSet:
    """`isolated` or `nohz_full` of devices/system/cpu: absent on kernels without the feature,
    empty or `(null)` (older kernels' nohz_full) when no CPU is listed. A garbled list is
    logged and read as none, so isolation never stops discovery."""
    relative = f"{CPU_DIR}/{name}"
    text = reader.text(relative)
    if isinstance(text, Missing):
        if text.reason != "missing":
            log.warning("ignoring unreadable CPU isolation list", reason=str(text))
        return CPUSet()
    if text in ("", "(null)"):
        return CPUSet()
    try:
        return CPUSet.parse(text)
    except CPUSetError as exc:
        log.warning("ignoring garbled CPU isolation list", path=relative, reason=str(exc))
        return CPUSet()


def _read_core_types(scan: _Scan) -> None:
    """Intel hybrid parts list their E-cores in cpu_atom and P-cores in cpu_core."""
    atom = scan.reader.cpuset("devices/cpu_atom/cpus")
    if isinstance(atom, Missing):
        if atom.reason != "missing":
            log.warning("ignoring unreadable E-core list", reason=str(atom))
        return
    core = scan.reader.cpuset("devices/cpu_core/cpus")
    if isinstance(core, Missing):
        log.info(2, "no P-core list on a hybrid CPU", reason=str(core))
        core = CPUSet()
    scan.e_cores, scan.p_cores = atom, core


def _required_int(reader: SysfsReader, relative: str) -> int:
    value = reader.integer(relative)
    if isinstance(value, Missing):
        raise Skip(str(value))
    if value < 0:
        raise Skip(f"{relative}: negative value {value}")
    return value


def _read_cpu(scan: _Scan, cpu_id: int, pcie_roots: tuple[str, ...]) -> CPUInfo:
    reader = scan.reader
    base = f"{CPU_DIR}/cpu{cpu_id}"
    socket_id = _required_int(reader, f"{base}/topology/physical_package_id")
    core_id = _required_int(reader, f"{base}/topology/core_id")

    cluster_id = -1
    cluster = reader.integer(f"{base}/topology/cluster_id")
    if isinstance(cluster, Missing):
        if cluster.reason != "missing":
            log.info(2, "ignoring unreadable cluster id", cpu=cpu_id, reason=str(cluster))
    elif 0 <= cluster != NO_CLUSTER:
        cluster_id = cluster

    entries = reader.listdir(base)
    if isinstance(entries, Missing):
        raise Skip(str(entries))
    nodes = sorted(int(m.group(1)) for m in map(_NODE_ENTRY.match, entries) if m)
    # No nodeN entry: a kernel without NUMA, everything is node 0.
    numa_node = nodes[0] if nodes else 0
    if nodes and numa_node not in scan.node_cpus:
        node_list = reader.cpuset(f"{NODE_DIR}/node{numa_node}/cpulist")
        if isinstance(node_list, Missing):
            log.info(
                2, "NUMA node cpulist unusable; deriving it", node=numa_node, reason=str(node_list)
            )
            node_list = CPUSet()
        scan.node_cpus[numa_node] = node_list

    if cpu_id not in scan.thread_groups:
        threads = reader.cpuset(f"{base}/topology/thread_siblings_list")
        if isinstance(threads, Missing) or cpu_id not in threads:
            log.info(4, "thread siblings unusable; using core ids", cpu=cpu_id, reason=str(threads))
        else:
            for sibling in threads:
                scan.thread_groups.setdefault(sibling, threads)

    if scan.e_cores is not None and cpu_id in scan.e_cores:
        core_type = "e-core"
    elif scan.p_cores is not None and cpu_id in scan.p_cores:
        core_type = "p-core"
    else:
        core_type = "standard"

    return CPUInfo(
        cpu_id=cpu_id,
        core_id=core_id,
        socket_id=socket_id,
        numa_node_id=numa_node,
        cluster_id=cluster_id,
        uncore_cache_id=_l3_id(scan, cpu_id, entries),
        core_type=core_type,
        numa_node_cpus=scan.node_cpus.get(numa_node, CPUSet()),
        pcie_roots=pcie_roots,
    )


def _l3_id(scan: _Scan, cpu_id: int, cpu_entries: list[str]) -> int:
    """The id of the CPU's level-3 cache; -1 when it has none.

    CPUs named in one cache's shared_cpu_list share that cache, so it is read once per cache.
    """
    if cpu_id in scan.l3_of:
        return scan.l3_of[cpu_id]
    if "cache" not in cpu_entries:
        return -1
    reader = scan.reader
    cache_dir = f"{CPU_DIR}/cpu{cpu_id}/cache"
    entries = reader.listdir(cache_dir)
    if isinstance(entries, Missing):
        log.info(2, "cache directory unreadable; no L3", cpu=cpu_id, reason=str(entries))
        return -1
    # The last level is usually the highest index: look there first.
    indexes = sorted(
        (m for m in map(_CACHE_ENTRY.match, entries) if m),
        key=lambda m: -int(m.group(1)),
    )
    for match in indexes:
        index_dir = f"{cache_dir}/{match.group(0)}"
        if reader.integer(f"{index_dir}/level") != 3:
            continue
        shared = reader.cpuset(f"{index_dir}/shared_cpu_list")
        cache_id = reader.integer(f"{index_dir}/id")
        if isinstance(cache_id, Missing) or cache_id < 0:
            if not (isinstance(cache_id, Missing) and cache_id.reason == "missing"):
                log.info(
                    2, "L3 id unusable; using its lowest CPU", cpu=cpu_id, reason=str(cache_id)
                )
            # ARM firmware often gives no id: name the cache after its lowest CPU.
            if isinstance(shared, Missing):
                raise Skip(f"L3 cache has no usable id nor shared_cpu_list ({shared})")
            cache_id = shared.first() if shared else cpu_id
        if not isinstance(shared, Missing):
            for member in shared:
                scan.l3_of.setdefault(member, cache_id)
        return cache_id
    return -1


def _pcie_roots(reader: SysfsReader) -> dict[str, CPUSet]:
    """PCIe host bridge name -> the CPUs local to it."""
    entries = reader.listdir("devices")
    if isinstance(entries, Missing):
        return {}
    roots: dict[str, CPUSet] = {}
    for name in sorted(e for e in entries if _PCIE_ROOT.match(e)):
        local = _pcie_local_cpus(reader, name)
        if isinstance(local, Missing):
            log.info(2, "PCIe root without CPU affinity; ignored", root=name, reason=str(local))
            continue
        roots[name] = local
        log.info(6, "PCIe root", root=name, cpus=local.format())
    return roots


def _pcie_local_cpus(reader: SysfsReader, name: str) -> CPUSet | Missing:
    bus = name.removeprefix("pci")
    local = reader.cpuset(f"devices/{name}/pci_bus/{bus}/cpulistaffinity")
    if not isinstance(local, Missing):
        return local
    # Some trees publish locality only on the devices below the bridge.
    children = reader.listdir(f"devices/{name}")
    if isinstance(children, Missing):
        return children
    for child in sorted(c for c in children if c.startswith(f"{bus}:")):
        device_local = reader.cpuset(f"devices/{name}/{child}/local_cpulist")
        if not isinstance(device_local, Missing):
            return device_local
    return local


def _check_siblings(machine: Machine, thread_groups: dict[int, CPUSet]) -> None:
    """Warn when the kernel's thread siblings disagree with the (socket, cluster, core) grouping;
    the allocator relies on the latter, so such a machine needs a look."""
    present = machine.cpu_set
    disagree = [
        c.cpu_id
        for c in machine.cpus
        if c.cpu_id in thread_groups and (thread_groups[c.cpu_id] & present) != c.siblings
    ]
    if disagree:
        log.warning(
            "thread_siblings_list disagrees with core ids",
            cpus=CPUSet(disagree).format(),
        )
