"""The CPU map as data: sockets → NUMA nodes → L3 groups → cores → hardware threads, each
thread marked with what it is (reserved, shared, or the claim that owns it); and each NUMA
node's memory devices: per kind, what they publish, what claims hold and which, what is free.

Pure: built from the topology and the allocator's view; `dracpu.api.page` draws it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from dracpu.core.cpuset import CPUSet
from dracpu.core.driver import MEMORY_KIND
from dracpu.core.errors import InvalidInputError
from dracpu.core.machine import CPUInfo, Machine
from dracpu.core.memory import binary_quantity, quantity_bytes

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
class MemoryHeld:
    """What a claim holds of one NUMA node's memory device: `kind` is `memory` or
    `hugepages-<size>`, in bytes."""

    node: int
    kind: str
    bytes: int


def kind_order(kind: str) -> tuple[int, int, str]:
    """Memory first, then the hugepage sizes from the smallest page up."""
    if kind == MEMORY_KIND:
        return (0, 0, kind)
    try:
        return (1, quantity_bytes(kind.removeprefix("hugepages-")), kind)
    except InvalidInputError:
        return (2, 0, kind)


@dataclass(frozen=True)
class ClaimEntry:
    uid: str
    namespace: str
    name: str
    cpus: CPUSet
    colour: str
    # The NUMA nodes its container takes memory from; empty when not placed (every node).
    memory_nodes: CPUSet = field(default_factory=CPUSet)
    # What it holds of memory devices, by node and kind.
    held: tuple[MemoryHeld, ...] = ()
    # Its container runs on the shared pool too (cpuConfig.sharedPool: include).
    shares_pool: bool = False

    @property
    def runs_on(self) -> str:
        """ ", claimed + shared" when its container runs on the shared pool too, for people."""
        return ", claimed + shared" if self.shares_pool else ""

    @property
    def label(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace or self.name else self.uid

    @property
    def memory(self) -> str:
        """Where the claim's memory is placed and what it holds of memory devices, for people:
        "" when it is not placed (every node)."""
        if not self.memory_nodes:
            return ""
        nodes = "node" if len(self.memory_nodes) == 1 else "nodes"
        text = f", memory on NUMA {nodes} {self.memory_nodes.format()}"
        if not self.held:
            return text
        one_node = len({h.node for h in self.held}) == 1
        amounts = "; ".join(
            f"{h.kind} {binary_quantity(h.bytes)}" + ("" if one_node else f" of node {h.node}")
            for h in sorted(self.held, key=lambda h: (h.node, kind_order(h.kind)))
        )
        return f"{text}: {amounts}"


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
            f"claim {self.claim.label} (uid {self.claim.uid}{self.claim.runs_on})"
            f"{self.claim.memory}"
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
class MemoryRow:
    """One kind of memory of one NUMA node: what its memory device publishes (None when it
    publishes none of it, or the devices are unknown), what claims hold, and which."""

    node: int
    kind: str
    published: int | None
    holders: tuple[tuple[ClaimEntry, int], ...] = ()

    @property
    def claimed(self) -> int:
        return sum(amount for _, amount in self.holders)

    @property
    def free(self) -> int | None:
        """As the allocator counts it at prepare: published less what claims hold."""
        return None if self.published is None else max(0, self.published - self.claimed)

    @property
    def summary(self) -> str:
        """`hugepages-2Mi 64Mi of 1Gi claimed, 960Mi free`, for people."""
        claimed = binary_quantity(self.claimed)
        if self.published is None or self.free is None:
            return f"{self.kind} {claimed} claimed, none published"
        return (
            f"{self.kind} {claimed} of {binary_quantity(self.published)} claimed, "
            f"{binary_quantity(self.free)} free"
        )


@dataclass(frozen=True)
class MemoryDevice:
    """A NUMA node's memory device as the allocator publishes it: kind -> bytes."""

    node: int
    capacity: Mapping[str, int]


@dataclass(frozen=True)
class NumaNode:
    node_id: int
    caches: tuple[CacheGroup, ...]
    memory: tuple[MemoryRow, ...] = ()


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
    held: tuple[MemoryHeld, ...] = ()
    shares_pool: bool = False  # its container runs on the shared pool too


@dataclass(frozen=True)
class CPUMap:
    sockets: tuple[Socket, ...]
    claims: tuple[ClaimEntry, ...]
    counts: dict[Role, int]
    cpu_count: int
    # Every NUMA node's memory rows, by node and kind; empty when no memory device is
    # published and no claim holds memory.
    memory: tuple[MemoryRow, ...] = ()

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


def memory_rows(
    devices: Sequence[MemoryDevice] | None, claims: Sequence[ClaimEntry]
) -> tuple[MemoryRow, ...]:
    """Per NUMA node and kind: what the node's memory device publishes (`devices` None: not
    known) and which claims hold how much of it. A kind a claim holds that no device publishes
    (a device gone since) is a row too, with nothing published."""
    published: dict[tuple[int, str], int | None] = {}
    for device in devices or ():
        for kind, size in device.capacity.items():
            published[(device.node, kind)] = size
    holders: dict[tuple[int, str], list[tuple[ClaimEntry, int]]] = {}
    for claim in claims:
        for held in claim.held:
            holders.setdefault((held.node, held.kind), []).append((claim, held.bytes))
            published.setdefault((held.node, held.kind), None)
    return tuple(
        MemoryRow(node, kind, size, tuple(holders.get((node, kind), ())))
        for (node, kind), size in sorted(
            published.items(), key=lambda item: (item[0][0], kind_order(item[0][1]))
        )
    )


def build(
    node: Machine,
    pool: Pool | None,
    claims: Sequence[ClaimCPUs],
    memory_devices: Sequence[MemoryDevice] | None = None,
) -> CPUMap:
    """Group the node's CPUs for drawing and mark each with its role; gather each NUMA node's
    memory from its memory device and the claims that hold some of it.

    Claims are ordered by their first CPU so colours follow the picture left to right.
    """
    ordered = sorted(claims, key=lambda c: (c.cpus.first() if c.cpus else 1 << 30, c.uid))
    entries = tuple(
        ClaimEntry(
            c.uid,
            c.namespace,
            c.name,
            c.cpus,
            claim_colour(index),
            c.memory_nodes,
            c.held,
            c.shares_pool,
        )
        for index, c in enumerate(ordered)
    )
    memory = memory_rows(memory_devices, entries)
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
                    tuple(row for row in memory if row.node == node_id),
                )
                for node_id, caches in sorted(nodes.items())
            ),
        )
        for socket_id, nodes in sorted(tree.items())
    )
    return CPUMap(sockets, entries, counts, len(node.cpus), memory)
