"""The node's CPU inventory as immutable data, and its three spellings: the topology service's
protobuf, the gatherinfo report, and the compact JSON `cpus` list that `dracpu simulate` reads.

A physical core is identified by (socket, cluster, core_id): sysfs core_id repeats across
sockets, so it is never an identity on its own.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from dracpu.core.cpuset import CPUSet
from dracpu.core.errors import CPUSetError, InvalidInputError
from dracpu.core.memory import HugepagePool, NodeMemory, memory_from_report

if TYPE_CHECKING:
    from dracpu.pb.topology.v1 import topology_pb2

CORE_TYPES = ("p-core", "e-core", "standard")


@dataclass(frozen=True, slots=True)
class CPUInfo:
    cpu_id: int
    core_id: int
    socket_id: int
    numa_node_id: int
    cluster_id: int = -1
    uncore_cache_id: int = -1
    core_type: str = "standard"
    siblings: CPUSet = field(default_factory=CPUSet)
    pcie_roots: tuple[str, ...] = ()
    numa_node_cpus: CPUSet = field(default_factory=CPUSet)
    physical_core_index: int = -1

    @property
    def core_key(self) -> tuple[int, int, int]:
        return (self.socket_id, self.cluster_id, self.core_id)


@dataclass(frozen=True)
class Machine:
    """Online CPUs with complete topology, ascending by id, plus node-wide facts."""

    cpus: tuple[CPUInfo, ...]
    online: CPUSet
    smt_control: str = ""
    skipped: tuple[str, ...] = ()
    sysfs_root: str = ""
    # The kernel's isolated (isolcpus=) and nohz_full CPUs, as listed; may name offline CPUs.
    isolated: CPUSet = field(default_factory=CPUSet)
    nohz_full: CPUSet = field(default_factory=CPUSet)
    # Each NUMA node's MemTotal and hugepage pools by node; none from older peers and reports.
    memory: tuple[NodeMemory, ...] = ()

    @classmethod
    def build(
        cls,
        cpus: Iterable[CPUInfo],
        online: CPUSet | None = None,
        *,
        smt_control: str = "",
        skipped: Iterable[str] = (),
        sysfs_root: str = "",
        isolated: CPUSet | None = None,
        nohz_full: CPUSet | None = None,
        memory: Iterable[NodeMemory] = (),
    ) -> Machine:
        """Normalise: sort, derive missing siblings / node cpusets, number physical cores."""
        ordered = sorted(cpus, key=lambda c: c.cpu_id)
        ids = [c.cpu_id for c in ordered]
        if len(set(ids)) != len(ids):
            raise InvalidInputError("duplicate cpu ids in topology")
        by_core: dict[tuple[int, int, int], list[int]] = {}
        by_node: dict[int, list[int]] = {}
        for cpu in ordered:
            by_core.setdefault(cpu.core_key, []).append(cpu.cpu_id)
            by_node.setdefault(cpu.numa_node_id, []).append(cpu.cpu_id)
        core_sets = {key: CPUSet(members) for key, members in by_core.items()}
        node_sets = {node: CPUSet(members) for node, members in by_node.items()}
        core_index = {
            key: index
            for index, key in enumerate(sorted(core_sets, key=lambda k: core_sets[k].first()))
        }
        present = CPUSet(ids)
        normalised = tuple(
            CPUInfo(
                cpu_id=c.cpu_id,
                core_id=c.core_id,
                socket_id=c.socket_id,
                numa_node_id=c.numa_node_id,
                cluster_id=c.cluster_id,
                uncore_cache_id=c.uncore_cache_id,
                core_type=c.core_type,
                # Siblings are the online threads of the same physical core.
                siblings=core_sets[c.core_key],
                pcie_roots=tuple(sorted(c.pcie_roots)),
                numa_node_cpus=(c.numa_node_cpus & present) or node_sets[c.numa_node_id],
                physical_core_index=core_index[c.core_key],
            )
            for c in ordered
        )
        return cls(
            cpus=normalised,
            online=present if online is None else online,
            smt_control=smt_control,
            skipped=tuple(skipped),
            sysfs_root=sysfs_root,
            isolated=isolated or CPUSet(),
            nohz_full=nohz_full or CPUSet(),
            memory=tuple(sorted(memory, key=lambda m: m.node)),
        )

    # ---- derived views ---------------------------------------------------------------------

    @cached_property
    def by_id(self) -> Mapping[int, CPUInfo]:
        return {c.cpu_id: c for c in self.cpus}

    @cached_property
    def cpu_set(self) -> CPUSet:
        return CPUSet(c.cpu_id for c in self.cpus)

    def _group(self, key: str) -> dict[int, CPUSet]:
        groups: dict[int, list[int]] = {}
        for cpu in self.cpus:
            groups.setdefault(getattr(cpu, key), []).append(cpu.cpu_id)
        return {k: CPUSet(v) for k, v in sorted(groups.items())}

    @cached_property
    def sockets(self) -> dict[int, CPUSet]:
        return self._group("socket_id")

    @cached_property
    def numa_nodes(self) -> dict[int, CPUSet]:
        return self._group("numa_node_id")

    def numa_nodes_of(self, cpus: CPUSet) -> CPUSet:
        """The NUMA nodes `cpus` lie on, as a set of node ids (a CPU the machine does not have
        counts in none)."""
        by_id = self.by_id
        return CPUSet(by_id[c].numa_node_id for c in cpus if c in by_id)

    @cached_property
    def uncore_caches(self) -> dict[int, CPUSet]:
        return self._group("uncore_cache_id")

    @cached_property
    def cores(self) -> dict[int, CPUSet]:
        """physical core index -> its online threads."""
        return self._group("physical_core_index")

    @cached_property
    def smt_enabled(self) -> bool:
        return any(len(c.siblings) > 1 for c in self.cpus)

    @cached_property
    def fingerprint(self) -> str:
        # The digest of json.dumps(self.to_report_cpus(), sort_keys=True), fed one CPU at a
        # time: the whole list and its text would be the largest allocation of a discovery, and
        # the long-running topology service keeps the heap it grew to.
        digest = hashlib.sha256(b"[")
        for i, cpu in enumerate(self.cpus):
            if i:
                digest.update(b", ")
            digest.update(json.dumps(_report_cpu(cpu), sort_keys=True).encode())
        digest.update(b"]" + self.online.format().encode())
        # Only a machine with isolation adds to the digest, so fingerprints of machines
        # without it stay what older releases computed.
        if self.isolated or self.nohz_full:
            digest.update(f"|{self.isolated.format()}|{self.nohz_full.format()}".encode())
        return digest.hexdigest()[:16]

    # ---- the gatherinfo report and the compact JSON ----------------------------------------

    def to_report_cpus(self) -> list[dict[str, Any]]:
        return [_report_cpu(c) for c in self.cpus]

    def summary(self) -> dict[str, Any]:
        return {
            "numCPUs": len(self.cpus),
            "numCores": len(self.cores),
            "numUncoreCache": len([k for k in self.uncore_caches if k >= 0]),
            "numSockets": len(self.sockets),
            "numNUMANodes": len(self.numa_nodes),
            "smtEnabled": self.smt_enabled,
        }

    @classmethod
    def from_report(cls, document: object, source: str = "topology") -> Machine:
        """Read a gatherinfo report or a JSON document with a top-level `cpus` list."""
        if not isinstance(document, dict):
            raise InvalidInputError(f"{source}: expected a mapping at the top level")
        cpus = document.get("cpus")
        details = document.get("cpuDetails")
        details = details if isinstance(details, dict) else {}
        if cpus is None:
            cpus = details.get("cpus")
        if not isinstance(cpus, list) or not cpus:
            raise InvalidInputError(f"{source}: no `cpus` list (nor `cpuDetails.cpus`)")
        entries = [_cpu_from_entry(entry, index, source) for index, entry in enumerate(cpus)]
        # Node-wide facts a gatherinfo report carries besides the CPU list; all optional.
        online = None
        if details.get("online"):
            try:
                online = CPUSet.parse(str(details["online"]))
            except CPUSetError as exc:
                raise InvalidInputError(f"{source}: cpuDetails.online: {exc}") from None
        skipped = details.get("skipped") or []
        if not isinstance(skipped, list):
            raise InvalidInputError(f"{source}: cpuDetails.skipped must be a list")
        isolation = {key: _cpuset_field(details, key, source) for key in ("isolated", "nohzFull")}
        return cls.build(
            entries,
            online,
            smt_control=str(details.get("smtControl") or ""),
            skipped=[str(item) for item in skipped],
            sysfs_root=str(document.get("sysfsRoot", "")),
            isolated=isolation["isolated"],
            nohz_full=isolation["nohzFull"],
            memory=memory_from_report(document.get("memory"), source),
        )

    # ---- protobuf ------------------------------------------------------------------------

    def to_proto(self) -> topology_pb2.Inventory:
        # Imported here: reports and simulations never touch protobuf.
        from dracpu.pb.topology.v1 import topology_pb2

        return topology_pb2.Inventory(
            cpus=[
                topology_pb2.CPU(
                    cpu_id=c.cpu_id,
                    core_id=c.core_id,
                    socket_id=c.socket_id,
                    cluster_id=c.cluster_id,
                    numa_node_id=c.numa_node_id,
                    uncore_cache_id=c.uncore_cache_id,
                    core_type=c.core_type,
                    siblings=c.siblings.format(),
                    pcie_roots=list(c.pcie_roots),
                    numa_node_cpus=c.numa_node_cpus.format(),
                    physical_core_index=c.physical_core_index,
                )
                for c in self.cpus
            ],
            online=self.online.format(),
            smt_enabled=self.smt_enabled,
            smt_control=self.smt_control,
            fingerprint=self.fingerprint,
            sysfs_root=self.sysfs_root,
            skipped=list(self.skipped),
            isolated=self.isolated.format(),
            nohz_full=self.nohz_full.format(),
            memory=[_memory_to_proto(m) for m in self.memory],
        )

    @classmethod
    def from_proto(cls, inventory: topology_pb2.Inventory) -> Machine:
        try:
            cpus = [
                CPUInfo(
                    cpu_id=c.cpu_id,
                    core_id=c.core_id,
                    socket_id=c.socket_id,
                    numa_node_id=c.numa_node_id,
                    cluster_id=c.cluster_id,
                    uncore_cache_id=c.uncore_cache_id,
                    core_type=c.core_type or "standard",
                    siblings=CPUSet.parse(c.siblings),
                    pcie_roots=tuple(c.pcie_roots),
                    numa_node_cpus=CPUSet.parse(c.numa_node_cpus),
                )
                for c in inventory.cpus
            ]
            online = CPUSet.parse(inventory.online)
            # Absent (empty) from topology services that predate isolation.
            isolated = CPUSet.parse(inventory.isolated)
            nohz_full = CPUSet.parse(inventory.nohz_full)
        except CPUSetError as exc:
            raise InvalidInputError(f"topology inventory: {exc}") from None
        return cls.build(
            cpus,
            online,
            smt_control=inventory.smt_control,
            skipped=inventory.skipped,
            sysfs_root=inventory.sysfs_root,
            isolated=isolated,
            nohz_full=nohz_full,
            memory=[_memory_from_proto(m) for m in inventory.memory],
        )


def _memory_to_proto(memory: NodeMemory) -> topology_pb2.NodeMemory:
    """A node's memory on the wire: -1 for a value that could not be read."""
    from dracpu.pb.topology.v1 import topology_pb2

    return topology_pb2.NodeMemory(
        numa_node_id=memory.node,
        mem_total_kib=-1 if memory.mem_total_kib is None else memory.mem_total_kib,
        hugepages=[
            topology_pb2.HugepagePool(
                size_kib=p.size_kib, total=p.total, free=-1 if p.free is None else p.free
            )
            for p in memory.hugepages
        ],
        problems=list(memory.problems),
    )


def _memory_from_proto(message: topology_pb2.NodeMemory) -> NodeMemory:
    """A node's memory off the wire; the -1 of an unread value, or any negative, is absent."""
    return NodeMemory(
        node=message.numa_node_id,
        mem_total_kib=message.mem_total_kib if message.mem_total_kib >= 0 else None,
        hugepages=tuple(
            sorted(
                (
                    HugepagePool(p.size_kib, max(p.total, 0), p.free if p.free >= 0 else None)
                    for p in message.hugepages
                    if p.size_kib > 0
                ),
                key=lambda p: p.size_kib,
            )
        ),
        problems=tuple(message.problems),
    )


def _int_field(entry: Mapping[str, Any], name: str, default: int | None, where: str) -> int:
    value = entry.get(name, default)
    if value is None:
        raise InvalidInputError(f"{where}: missing {name}")
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInputError(f"{where}: {name} must be an integer, got {value!r}")
    return value


def _cpuset_field(details: Mapping[str, Any], name: str, source: str) -> CPUSet:
    """An optional cpuset of `cpuDetails` (reports of older releases have none)."""
    value = details.get(name)
    if value is None or value == "":
        return CPUSet()
    if not isinstance(value, str | int) or isinstance(value, bool):
        raise InvalidInputError(f"{source}: cpuDetails.{name} must be a cpuset string")
    try:
        return CPUSet.parse(str(value))
    except CPUSetError as exc:
        raise InvalidInputError(f"{source}: cpuDetails.{name}: {exc}") from None


def _cpu_from_entry(entry: object, index: int, source: str) -> CPUInfo:
    where = f"{source}: cpus[{index}]"
    if not isinstance(entry, dict):
        raise InvalidInputError(f"{where}: expected a mapping")
    cpu_id = _int_field(entry, "cpuID", None, where)
    if cpu_id < 0:
        raise InvalidInputError(f"{where}: cpuID must not be negative")
    try:
        siblings = CPUSet.parse(str(entry.get("siblings", "")))
        node_cpus = CPUSet.parse(str(entry.get("numaNodeCPUSet", "")))
    except CPUSetError as exc:
        raise InvalidInputError(f"{where}: {exc}") from None
    sibling = _int_field(entry, "sibling", -1, where)
    if not siblings and sibling >= 0:
        siblings = CPUSet([cpu_id, sibling])
    roots = entry.get("pcieRoots") or []
    if not isinstance(roots, list) or not all(isinstance(r, str) for r in roots):
        raise InvalidInputError(f"{where}: pcieRoots must be a list of strings")
    core_type = str(entry.get("coreType", "standard"))
    if core_type not in CORE_TYPES:
        raise InvalidInputError(f"{where}: coreType must be one of {', '.join(CORE_TYPES)}")
    return CPUInfo(
        cpu_id=cpu_id,
        core_id=_int_field(entry, "coreID", None, where),
        socket_id=_int_field(entry, "socketID", None, where),
        numa_node_id=_int_field(entry, "numaNodeID", 0, where),
        cluster_id=_int_field(entry, "clusterID", -1, where),
        uncore_cache_id=_int_field(entry, "uncoreCacheID", -1, where),
        core_type=core_type,
        siblings=siblings,
        pcie_roots=tuple(roots),
        numa_node_cpus=node_cpus,
    )


def _report_cpu(c: CPUInfo) -> dict[str, Any]:
    """One CPU as a gatherinfo report (and the fingerprint) spells it."""
    return {
        "cpuID": c.cpu_id,
        "coreID": c.core_id,
        "socketID": c.socket_id,
        "clusterID": c.cluster_id,
        "numaNodeID": c.numa_node_id,
        "numaNodeCPUSet": c.numa_node_cpus.format(),
        "sibling": next((s for s in c.siblings if s != c.cpu_id), -1),
        "siblings": c.siblings.format(),
        "coreType": c.core_type,
        "uncoreCacheID": c.uncore_cache_id,
        "pcieRoots": list(c.pcie_roots),
    }
