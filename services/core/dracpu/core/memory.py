"""The memory of each NUMA node as the topology service reads it: the node's MemTotal and its
hugepage pools, and the spelling of byte counts as Kubernetes quantities.

A value the kernel's files did not give is absent (None), with the reason in `problems`; it is
never guessed.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dracpu.core.errors import InvalidInputError

KIB = 1024
# The binary suffixes of Kubernetes quantities, each 1024 times the one before.
_BINARY_SUFFIXES = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")


@dataclass(frozen=True, slots=True)
class HugepagePool:
    """One hugepage size of a NUMA node: `nr_hugepages` pages, `free_hugepages` of them free
    (None when that file could not be read)."""

    size_kib: int
    total: int
    free: int | None = None

    @property
    def size_bytes(self) -> int:
        return self.size_kib * KIB

    @property
    def total_bytes(self) -> int:
        return self.total * self.size_bytes

    @property
    def size_name(self) -> str:
        """The size as Kubernetes names it in `hugepages-<size>`: 2Mi, 1Gi, 64Ki."""
        return binary_quantity(self.size_bytes)


@dataclass(frozen=True, slots=True)
class NodeMemory:
    """A NUMA node's memory: MemTotal (None when its meminfo is missing or unreadable) and its
    hugepage pools, ascending by size. `problems` says what could not be read, `path: reason`."""

    node: int
    mem_total_kib: int | None
    hugepages: tuple[HugepagePool, ...] = ()
    problems: tuple[str, ...] = ()

    @property
    def mem_total_bytes(self) -> int | None:
        return None if self.mem_total_kib is None else self.mem_total_kib * KIB

    @property
    def hugepage_bytes(self) -> int:
        return sum(pool.total_bytes for pool in self.hugepages)

    @property
    def regular_bytes(self) -> int | None:
        """MemTotal less the memory held in hugepage pools (which MemTotal includes): what the
        node has for ordinary allocations. None when MemTotal is unknown."""
        total = self.mem_total_bytes
        return None if total is None else max(0, total - self.hugepage_bytes)

    def to_report(self) -> dict[str, Any]:
        """The node as the gatherinfo report spells it."""
        return {
            "numaNodeID": self.node,
            "memTotalKiB": self.mem_total_kib,
            "hugepages": [
                {"sizeKiB": pool.size_kib, "total": pool.total, "free": pool.free}
                for pool in self.hugepages
            ],
            "problems": list(self.problems),
        }

    @classmethod
    def from_report(cls, entry: object, where: str) -> NodeMemory:
        """A node of a gatherinfo report's `memory` list; InvalidInputError names the field."""
        if not isinstance(entry, Mapping):
            raise InvalidInputError(f"{where}: expected a mapping")
        pools = entry.get("hugepages") or []
        if not isinstance(pools, list):
            raise InvalidInputError(f"{where}: hugepages must be a list")
        problems = entry.get("problems") or []
        if not isinstance(problems, list):
            raise InvalidInputError(f"{where}: problems must be a list")
        return cls(
            node=_count(entry.get("numaNodeID"), f"{where}: numaNodeID"),
            mem_total_kib=_count_or_none(entry.get("memTotalKiB"), f"{where}: memTotalKiB"),
            hugepages=tuple(
                sorted(
                    (
                        _pool(pool, f"{where}: hugepages[{index}]")
                        for index, pool in enumerate(pools)
                    ),
                    key=lambda pool: pool.size_kib,
                )
            ),
            problems=tuple(str(problem) for problem in problems),
        )


def memory_from_report(entries: object, source: str) -> tuple[NodeMemory, ...]:
    """The `memory` list of a gatherinfo report (absent from reports of older releases)."""
    if entries is None:
        return ()
    if not isinstance(entries, list):
        raise InvalidInputError(f"{source}: memory must be a list")
    return tuple(
        NodeMemory.from_report(entry, f"{source}: memory[{index}]")
        for index, entry in enumerate(entries)
    )


def memory_fingerprint(memory: Sequence[NodeMemory]) -> str:
    """Changes whenever a node's MemTotal or the size of one of its hugepage pools changes;
    free pages come and go and are left out."""
    document = [
        [m.node, m.mem_total_kib, [[p.size_kib, p.total] for p in m.hugepages]] for m in memory
    ]
    return hashlib.sha256(json.dumps(document).encode()).hexdigest()[:16]


def _count(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInputError(f"{where}: expected a whole number, got {value!r}")
    return value


def _count_or_none(value: object, where: str) -> int | None:
    return None if value is None else _count(value, where)


def _pool(entry: object, where: str) -> HugepagePool:
    if not isinstance(entry, Mapping):
        raise InvalidInputError(f"{where}: expected a mapping")
    size = _count(entry.get("sizeKiB"), f"{where}: sizeKiB")
    if size == 0:
        raise InvalidInputError(f"{where}: sizeKiB must be positive")
    return HugepagePool(
        size_kib=size,
        total=_count(entry.get("total"), f"{where}: total"),
        free=_count_or_none(entry.get("free"), f"{where}: free"),
    )


def binary_quantity(value: int) -> str:
    """`value` bytes as Kubernetes writes a binary quantity: the largest binary suffix that
    divides it exactly (17179869184 -> 16Gi, 2097152 -> 2Mi), plain digits otherwise."""
    if value < 0:
        raise ValueError(f"a byte count cannot be negative: {value}")
    exponent = 0
    while value >= KIB and value % KIB == 0 and exponent < len(_BINARY_SUFFIXES) - 1:
        value //= KIB
        exponent += 1
    return f"{value}{_BINARY_SUFFIXES[exponent]}"


def quantity_bytes(text: str) -> int:
    """The bytes of a quantity as `binary_quantity` writes it (`13Gi`, `7680Mi`, `0`); a
    memory device's capacities are always written so. Raises InvalidInputError for any other
    spelling."""
    digits = text.rstrip("KMGTPEi")
    suffix = text[len(digits) :]
    if not digits.isascii() or not digits.isdigit() or suffix not in _BINARY_SUFFIXES:
        raise InvalidInputError(f"{text!r} is not a byte count such as 64Mi or 1Gi")
    return int(digits) << (10 * _BINARY_SUFFIXES.index(suffix))
