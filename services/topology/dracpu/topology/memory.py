"""Memory discovery from a sysfs tree: per NUMA node, MemTotal from
`devices/system/node/nodeN/meminfo` and every hugepage pool of
`devices/system/node/nodeN/hugepages/hugepages-<size>kB` (`nr_hugepages`, `free_hugepages`).

Memory is read for every node directory, those without CPUs included. No file's contents can
make it fail: a value that cannot be read is absent, and the node's `problems` say why.
"""

from __future__ import annotations

import re

from dracpu.core.log import get_logger
from dracpu.core.memory import HugepagePool, NodeMemory
from dracpu.topology.sysfs import Missing, SysfsReader

log = get_logger(__name__)

NODE_DIR = "devices/system/node"
_NODE_ENTRY = re.compile(r"^node(\d+)$")
_POOL_ENTRY = re.compile(r"^hugepages-(\d+)kB$")
# "Node 0 MemTotal:       16318412 kB": the node number is the directory's, so only the
# field and its value matter.
_MEM_TOTAL = re.compile(r"^(?:Node\s+\d+\s+)?MemTotal:\s*(\d+)(?:\s*kB)?$", re.MULTILINE)


def discover_memory(reader: SysfsReader) -> tuple[NodeMemory, ...]:
    """Every NUMA node's memory, ascending by node; none on a kernel without NUMA nodes."""
    entries = reader.listdir(NODE_DIR)
    if isinstance(entries, Missing):
        if entries.reason != "missing":
            log.warning("cannot list the NUMA nodes; no memory is reported", reason=str(entries))
        return ()
    nodes = sorted(int(m.group(1)) for m in map(_NODE_ENTRY.match, entries) if m)
    found = tuple(read_node_memory(reader, node) for node in nodes)
    for memory in found:
        for problem in memory.problems:
            # Said at level 2: the allocator has the tree read again every 30 s, and the
            # inventory (/v1/topology, gatherinfo) carries the reasons.
            log.info(2, "NUMA node memory partly unreadable", node=memory.node, reason=problem)
    return found


def read_node_memory(reader: SysfsReader, node: int) -> NodeMemory:
    """One node's MemTotal and hugepage pools; what cannot be read is absent and said."""
    base = f"{NODE_DIR}/node{node}"
    problems: list[str] = []
    mem_total = _mem_total(reader, f"{base}/meminfo", problems)
    pools = _pools(reader, f"{base}/hugepages", problems)
    return NodeMemory(node, mem_total, pools, tuple(problems))


def _mem_total(reader: SysfsReader, path: str, problems: list[str]) -> int | None:
    text = reader.text(path)
    if isinstance(text, Missing):
        problems.append(str(text))
        return None
    matches = _MEM_TOTAL.findall(text)
    if len(matches) != 1:
        what = "no MemTotal line" if not matches else "more than one MemTotal line"
        problems.append(f"{path}: {what}")
        return None
    return int(matches[0])


def _pools(reader: SysfsReader, directory: str, problems: list[str]) -> tuple[HugepagePool, ...]:
    entries = reader.listdir(directory)
    if isinstance(entries, Missing):
        # No hugepages directory: a kernel without hugetlbfs, so the node has no pools.
        if entries.reason != "missing":
            problems.append(str(entries))
        return ()
    pools = []
    for size in sorted(int(m.group(1)) for m in map(_POOL_ENTRY.match, entries) if m):
        pool_dir = f"{directory}/hugepages-{size}kB"
        if size == 0:
            problems.append(f"{pool_dir}: a pool of 0 kB pages")
            continue
        total = reader.integer(f"{pool_dir}/nr_hugepages")
        if isinstance(total, Missing) or total < 0:
            problems.append(_reason(total, f"{pool_dir}/nr_hugepages"))
            continue
        read = reader.integer(f"{pool_dir}/free_hugepages")
        free: int | None = None
        if isinstance(read, Missing) or read < 0:
            problems.append(_reason(read, f"{pool_dir}/free_hugepages"))
        else:
            free = read
        pools.append(HugepagePool(size_kib=size, total=total, free=free))
    return tuple(pools)


def _reason(value: int | Missing, path: str) -> str:
    return str(value) if isinstance(value, Missing) else f"{path}: negative value {value}"
