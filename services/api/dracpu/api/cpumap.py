"""The CPU map as data: sockets → NUMA nodes → L3 groups → cores → hardware threads, each
thread marked with what it is (reserved, shared, or the claim that owns it).

Pure: built from the topology and the allocator's view; `dracpu.api.page` draws it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from dracpu.core.cpuset import CPUSet
from dracpu.core.machine import CPUInfo, Machine

Role = Literal["claim", "reserved", "shared", "exclusive", "unknown"]

# Fixed colours for the fixed roles; claims get the palette, then golden-angle hues.
ROLE_COLOURS: dict[Role, str] = {
    "reserved": "#9e9e9e",
    "shared": "#d6ecd2",
    "exclusive": "#6d6d6d",
    "unknown": "#ffffff",
}
ROLE_LABELS: dict[Role, str] = {
    "reserved": "reserved (not managed by the driver)",
    "shared": "shared pool",
    "exclusive": "exclusive, no claim recorded",
    "unknown": "unknown (allocator unavailable)",
    "claim": "claim",
}
_PALETTE = (
    "#f4a261",
    "#8ecae6",
    "#e9c46a",
    "#f28482",
    "#b5a3e0",
    "#84dcc6",
    "#ffb4d1",
    "#c9e265",
    "#ffcf99",
    "#9ad1f5",
    "#e0b0ff",
    "#f6bd60",
)


def claim_colour(index: int) -> str:
    if index < len(_PALETTE):
        return _PALETTE[index]
    # Light tones keep the dark CPU numbers readable.
    hue = (index * 137.508) % 360
    return f"hsl({hue:.0f},70%,74%)"


@dataclass(frozen=True)
class ClaimEntry:
    uid: str
    namespace: str
    name: str
    cpus: CPUSet
    colour: str
    # The NUMA nodes its container takes memory from; empty when not placed (every node).
    memory_nodes: CPUSet = field(default_factory=CPUSet)

    @property
    def label(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace or self.name else self.uid

    @property
    def memory(self) -> str:
        """Where the claim's memory is placed, for people: "" when it is not (every node)."""
        if not self.memory_nodes:
            return ""
        nodes = "node" if len(self.memory_nodes) == 1 else "nodes"
        return f", memory on NUMA {nodes} {self.memory_nodes.format()}"


@dataclass(frozen=True)
class Thread:
    cpu: CPUInfo
    role: Role
    claim: ClaimEntry | None

    @property
    def colour(self) -> str:
        return self.claim.colour if self.claim else ROLE_COLOURS[self.role]

    @property
    def title(self) -> str:
        cpu = self.cpu
        place = (
            f"socket {cpu.socket_id}, NUMA node {cpu.numa_node_id}, "
            f"L3 {cpu.uncore_cache_id}, core {cpu.physical_core_index} ({cpu.core_type})"
        )
        what = (
            f"claim {self.claim.label} (uid {self.claim.uid}){self.claim.memory}"
            if self.claim
            else ROLE_LABELS[self.role]
        )
        return f"CPU {cpu.cpu_id} — {place} — {what}"


@dataclass(frozen=True)
class Core:
    index: int
    core_type: str
    threads: tuple[Thread, ...]


@dataclass(frozen=True)
class CacheGroup:
    l3_id: int
    cores: tuple[Core, ...]


@dataclass(frozen=True)
class NumaNode:
    node_id: int
    caches: tuple[CacheGroup, ...]


@dataclass(frozen=True)
class Socket:
    socket_id: int
    numa_nodes: tuple[NumaNode, ...]


@dataclass(frozen=True)
class Pool:
    """What the allocator reports of the node's CPUs."""

    shared: CPUSet
    reserved: CPUSet
    exclusive: CPUSet


@dataclass(frozen=True)
class ClaimCPUs:
    uid: str
    namespace: str
    name: str
    cpus: CPUSet
    memory_nodes: CPUSet = field(default_factory=CPUSet)


@dataclass(frozen=True)
class CPUMap:
    sockets: tuple[Socket, ...]
    claims: tuple[ClaimEntry, ...]
    counts: dict[Role, int]
    cpu_count: int

    def threads(self) -> list[Thread]:
        return [
            thread
            for socket in self.sockets
            for node in socket.numa_nodes
            for cache in node.caches
            for core in cache.cores
            for thread in core.threads
        ]


def _role(cpu: int, pool: Pool | None, owner: ClaimEntry | None) -> Role:
    if owner is not None:
        return "claim"
    if pool is None:
        return "unknown"
    if cpu in pool.reserved:
        return "reserved"
    if cpu in pool.shared:
        return "shared"
    if cpu in pool.exclusive:
        return "exclusive"
    return "unknown"


def build(node: Machine, pool: Pool | None, claims: Sequence[ClaimCPUs]) -> CPUMap:
    """Group the node's CPUs for drawing and mark each with its role.

    Claims are ordered by their first CPU so colours follow the picture left to right.
    """
    ordered = sorted(claims, key=lambda c: (c.cpus.first() if c.cpus else 1 << 30, c.uid))
    entries = tuple(
        ClaimEntry(c.uid, c.namespace, c.name, c.cpus, claim_colour(index), c.memory_nodes)
        for index, c in enumerate(ordered)
    )
    owner_of: dict[int, ClaimEntry] = {}
    for entry in entries:
        for cpu_id in entry.cpus:
            owner_of.setdefault(cpu_id, entry)

    tree: dict[int, dict[int, dict[int, dict[int, list[CPUInfo]]]]] = {}
    for cpu in node.cpus:
        tree.setdefault(cpu.socket_id, {}).setdefault(cpu.numa_node_id, {}).setdefault(
            cpu.uncore_cache_id, {}
        ).setdefault(cpu.physical_core_index, []).append(cpu)

    counts: dict[Role, int] = {}

    def thread(cpu: CPUInfo) -> Thread:
        owner = owner_of.get(cpu.cpu_id)
        role = _role(cpu.cpu_id, pool, owner)
        counts[role] = counts.get(role, 0) + 1
        return Thread(cpu, role, owner)

    sockets = tuple(
        Socket(
            socket_id,
            tuple(
                NumaNode(
                    node_id,
                    tuple(
                        CacheGroup(
                            l3_id,
                            tuple(
                                Core(index, cpus[0].core_type, tuple(thread(c) for c in cpus))
                                for index, cpus in sorted(
                                    cores.items(), key=lambda item: item[1][0].cpu_id
                                )
                            ),
                        )
                        for l3_id, cores in sorted(caches.items())
                    ),
                )
                for node_id, caches in sorted(nodes.items())
            ),
        )
        for socket_id, nodes in sorted(tree.items())
    )
    return CPUMap(sockets, entries, counts, len(node.cpus))
