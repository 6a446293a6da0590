"""Per-machine lookup tables for the assignment algorithm, as int bitmasks.

Built once per Machine and cached, so one allocation only does mask arithmetic. Every group
(core, socket, NUMA node, uncore cache) is described by its actual member CPUs; nothing is
derived from averages such as CPUs ÷ cores, because real machines are not always symmetric
(offline siblings, isolated cores).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from dracpu.core.cpuset import CPUSet, runs_of
from dracpu.core.machine import Machine

# A run of consecutive CPU ids of one NUMA node: (first id, how many, their mask shifted to
# bit 0).
Run = tuple[int, int, int]
# A node whose ids form more runs than this (an interleaved numbering) keeps machine-wide masks:
# converting to and from its local numbering would cost more than it saves.
MAX_LOCAL_RUNS = 4


def local_mask(cpus: int, runs: tuple[Run, ...]) -> int:
    """The CPUs of `cpus` inside the runs, renumbered 0, 1, ... in ascending id order (so the
    local numbering keeps the order of the ids)."""
    local, offset = 0, 0
    for first, length, low in runs:
        local |= ((cpus >> first) & low) << offset
        offset += length
    return local


def global_mask(local: int, runs: tuple[Run, ...]) -> int:
    """The inverse of `local_mask`: the machine's CPU ids of a local mask."""
    cpus, offset = 0, 0
    for first, length, low in runs:
        cpus |= ((local >> offset) & low) << first
        offset += length
    return cpus


def _runs(mask: int) -> tuple[Run, ...]:
    return tuple((first, ones, (1 << ones) - 1) for first, ones in runs_of(mask))


@dataclass(frozen=True, slots=True)
class TopologyIndex:
    """Masks of every topology group and which groups contain which.

    Cores are numbered by `physical_core_index` (the order of their first CPU), which is the
    kubelet's core numbering on real machines (cadvisor names a core by its lowest thread id).
    """

    all_cpus: int
    core_masks: tuple[int, ...]
    socket_masks: dict[int, int]
    numa_masks: dict[int, int]
    uncore_masks: dict[int, int]
    # Sorted member lists of each containment relation the kubelet walks.
    numa_sockets: dict[int, tuple[int, ...]]
    socket_numas: dict[int, tuple[int, ...]]
    socket_numa_masks: dict[tuple[int, int], int]
    socket_cores: dict[int, tuple[int, ...]]
    numa_cores: dict[int, tuple[int, ...]]
    numa_uncores: dict[int, tuple[int, ...]]
    numa_uncore_masks: dict[tuple[int, int], int]
    uncore_cores: dict[int, tuple[int, ...]]
    # The largest number of threads of one core (2 on usual SMT machines, 1 without SMT).
    smt_width: int
    # The fewest CPUs of a socket, NUMA node and uncore cache: a take needing fewer cannot
    # take a whole one, so it need not sort them.
    smallest_socket: int
    smallest_numa: int
    smallest_uncore: int
    # Each CPU's socket and NUMA node: a set of CPUs inside one of them is ordered at once.
    cpu_socket: dict[int, int]
    cpu_numa: dict[int, int]
    # Per NUMA node, (mask, CPUs) of each of its cores by id, for takes inside one node.
    numa_core_masks: dict[int, tuple[tuple[int, int], ...]]
    # Per NUMA node whose CPU ids form few runs: the runs, and (mask, CPUs) of each of its cores
    # by id in the node's local numbering (see `local_mask`). A take inside the node then works
    # on masks of a few dozen bits instead of masks as wide as the machine.
    numa_runs: dict[int, tuple[Run, ...]]
    numa_local_cores: dict[int, tuple[tuple[int, int], ...]]
    # The kubelet walks NUMA nodes before sockets unless a socket holds several NUMA nodes.
    numa_first: bool
    # The CPU ids of each core by id, and the bytes of a mask of every CPU: counting a core's
    # free CPUs from one bytes copy of a free mask spares a mask per core.
    core_cpus: tuple[tuple[int, ...], ...]
    mask_bytes: int
    # Whether every core is a member of one socket only and of one NUMA node only: then a
    # walk over the cores of each socket (or NUMA node) meets every core once.
    cores_partitioned: bool

    @property
    def cpu_count(self) -> int:
        return self.all_cpus.bit_count()

    def whole_free_cores(self, free: int) -> int:
        """The CPUs of every core whose threads are all in `free`."""
        mask = 0
        for core in self.core_masks:
            if free & core == core:
                mask |= core
        return mask

    def core_free_counts(self, free: int) -> list[int]:
        """The number of CPUs of `free` in each core, by core id."""
        data = (free & self.all_cpus).to_bytes(self.mask_bytes, "little")
        counts = []
        for cpus in self.core_cpus:
            n = 0
            for cpu in cpus:
                n += (data[cpu >> 3] >> (cpu & 7)) & 1
            counts.append(n)
        return counts

    def partial_cores(self, cpus: int) -> list[int]:
        """Indexes of the cores that `cpus` covers only in part."""
        return [i for i, core in enumerate(self.core_masks) if 0 != cpus & core != core]


def build_index(machine: Machine) -> TopologyIndex:
    cores: dict[int, int] = {}
    sockets: dict[int, int] = {}
    numas: dict[int, int] = {}
    uncores: dict[int, int] = {}
    socket_numa: dict[tuple[int, int], int] = {}
    numa_uncore: dict[tuple[int, int], int] = {}
    socket_cores: dict[int, set[int]] = {}
    numa_cores: dict[int, set[int]] = {}
    uncore_cores: dict[int, set[int]] = {}
    for cpu in machine.cpus:
        bit = 1 << cpu.cpu_id
        core = cpu.physical_core_index
        cores[core] = cores.get(core, 0) | bit
        sockets[cpu.socket_id] = sockets.get(cpu.socket_id, 0) | bit
        numas[cpu.numa_node_id] = numas.get(cpu.numa_node_id, 0) | bit
        key = (cpu.socket_id, cpu.numa_node_id)
        socket_numa[key] = socket_numa.get(key, 0) | bit
        socket_cores.setdefault(cpu.socket_id, set()).add(core)
        numa_cores.setdefault(cpu.numa_node_id, set()).add(core)
        # An unknown cache (negative id) counts as one per socket, as the kubelet does when
        # cadvisor reports none (topology.getUncoreCacheID falls back to the socket id).
        uncore = cpu.uncore_cache_id if cpu.uncore_cache_id >= 0 else cpu.socket_id
        uncores[uncore] = uncores.get(uncore, 0) | bit
        pair = (cpu.numa_node_id, uncore)
        numa_uncore[pair] = numa_uncore.get(pair, 0) | bit
        uncore_cores.setdefault(uncore, set()).add(core)
    core_masks = tuple(cores[i] for i in range(len(cores)))
    numa_core_masks = {
        numa: tuple((core_masks[c], core_masks[c].bit_count()) for c in sorted(members))
        for numa, members in sorted(numa_cores.items())
    }
    numa_runs = {
        numa: runs for numa, mask in numas.items() if len(runs := _runs(mask)) <= MAX_LOCAL_RUNS
    }
    return TopologyIndex(
        all_cpus=_union(cores.values()),
        core_masks=core_masks,
        socket_masks=dict(sorted(sockets.items())),
        numa_masks=dict(sorted(numas.items())),
        uncore_masks=dict(sorted(uncores.items())),
        numa_sockets=_related(socket_numa, lambda k: k[1], lambda k: k[0]),
        socket_numas=_related(socket_numa, lambda k: k[0], lambda k: k[1]),
        socket_numa_masks=socket_numa,
        socket_cores={k: tuple(sorted(v)) for k, v in sorted(socket_cores.items())},
        numa_cores={k: tuple(sorted(v)) for k, v in sorted(numa_cores.items())},
        numa_uncores=_related(numa_uncore, lambda k: k[0], lambda k: k[1]),
        numa_uncore_masks=numa_uncore,
        uncore_cores={k: tuple(sorted(v)) for k, v in sorted(uncore_cores.items())},
        smt_width=max((m.bit_count() for m in core_masks), default=1),
        smallest_socket=_smallest(sockets.values()),
        smallest_numa=_smallest(numas.values()),
        smallest_uncore=_smallest(uncores.values()),
        cpu_socket={cpu.cpu_id: cpu.socket_id for cpu in machine.cpus},
        cpu_numa={cpu.cpu_id: cpu.numa_node_id for cpu in machine.cpus},
        numa_core_masks=numa_core_masks,
        numa_runs=numa_runs,
        numa_local_cores={
            numa: tuple((local_mask(mask, runs), size) for mask, size in numa_core_masks[numa])
            for numa, runs in numa_runs.items()
        },
        numa_first=len(sockets) >= len(numas),
        core_cpus=tuple(tuple(CPUSet.from_mask(mask).sorted()) for mask in core_masks),
        cores_partitioned=sum(map(len, socket_cores.values())) == len(cores)
        and sum(map(len, numa_cores.values())) == len(cores),
        mask_bytes=max(_union(cores.values()).bit_length() // 8 + 1, 1),
    )


def _union(masks: Iterable[int]) -> int:
    result = 0
    for mask in masks:
        result |= mask
    return result


def _smallest(masks: Iterable[int]) -> int:
    return min((mask.bit_count() for mask in masks), default=0)


def _related(
    pairs: dict[tuple[int, int], int],
    outer: Callable[[tuple[int, int]], int],
    inner: Callable[[tuple[int, int]], int],
) -> dict[int, tuple[int, ...]]:
    grouped: dict[int, set[int]] = {}
    for key in pairs:
        grouped.setdefault(outer(key), set()).add(inner(key))
    return {k: tuple(sorted(v)) for k, v in sorted(grouped.items())}


# Machines are immutable and few (one per topology generation), so the index lives as long as
# its Machine: keyed by identity, dropped when the Machine is collected.
_CACHE: dict[int, tuple[weakref.ref[Machine], TopologyIndex]] = {}
_LOCK = threading.Lock()


def index_for(machine: Machine) -> TopologyIndex:
    key = id(machine)
    entry = _CACHE.get(key)
    if entry is not None and entry[0]() is machine:
        return entry[1]
    index = build_index(machine)

    def forget(ref: weakref.ref[Machine]) -> None:
        with _LOCK:
            current = _CACHE.get(key)
            if current is not None and current[0] is ref:
                del _CACHE[key]

    with _LOCK:
        _CACHE[key] = (weakref.ref(machine, forget), index)
    return index
