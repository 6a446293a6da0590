"""The memory a claim takes from memory devices (`memory-node-<N>`): the bytes each result
consumes per kind, summed per NUMA node, and checked against what the node's other claims
already hold of that device's published capacity."""

from __future__ import annotations

from collections.abc import Iterable

from dracpu.allocator.claims.model import ClaimRecord, MemoryAmount, PrepareInput, ResultInput
from dracpu.allocator.claims.state import NodeState
from dracpu.core.cpuset import CPUSet
from dracpu.core.driver import ATTR_NUMA_NODE, MEMORY_DEVICE_PREFIX
from dracpu.core.driver import memory_capacity as capacity_of
from dracpu.core.driver import memory_kind as kind_of
from dracpu.core.errors import InsufficientMemoryError, InvalidInputError, NotFoundError
from dracpu.core.memory import binary_quantity
from dracpu.core.quantity import byte_count, parse_quantity


def _node_of(state: NodeState, uid: str, result: ResultInput) -> int:
    device = state.devices.by_name.get(result.device)
    where = f"claim {uid} request {result.request!r} device {result.device!r}"
    if device is None or device.kind != "memory":
        raise NotFoundError(f"{where}: no such device on this node")
    node = device.attributes.get(ATTR_NUMA_NODE)
    if not isinstance(node, int):
        raise NotFoundError(f"{where}: the device has no NUMA node")
    return node


def wanted(state: NodeState, request: PrepareInput) -> tuple[MemoryAmount, ...]:
    """What the request's memory results consume, summed per node and kind, in node and kind
    order. A result without consumed capacity takes nothing."""
    totals: dict[tuple[int, str], int] = {}
    for result in request.results:
        if not result.device.startswith(MEMORY_DEVICE_PREFIX):
            continue
        node = _node_of(state, request.uid, result)
        for capacity, text in result.consumed.items():
            where = (
                f"claim {request.uid} request {result.request!r} device {result.device!r} "
                f"capacity {capacity}"
            )
            kind = kind_of(capacity)
            if kind is None:
                raise InvalidInputError(f"{where}: not a capacity of a memory device")
            totals[(node, kind)] = totals.get((node, kind), 0) + byte_count(text, where)
    return tuple(
        MemoryAmount(node, kind, amount) for (node, kind), amount in sorted(totals.items())
    )


def held(records: Iterable[ClaimRecord], node: int, kind: str) -> int:
    return sum(a.bytes for r in records for a in r.memory if a.node == node and a.kind == kind)


def capacity(state: NodeState, node: int, kind: str) -> int:
    """The memory device's published capacity of `kind` (the pool's size for hugepages);
    0 when the device does not publish it."""
    device = state.devices.by_name.get(f"{MEMORY_DEVICE_PREFIX}{node}")
    text = None if device is None else device.capacity.get(capacity_of(kind))
    return 0 if text is None else int(parse_quantity(text))


def check_free(state: NodeState, uid: str, amounts: tuple[MemoryAmount, ...]) -> None:
    """Refuse, in one line, the first amount past what the node's other claims leave free."""
    others = [r for r in (*state.records.values(), *state.draining.values()) if r.uid != uid]
    for amount in amounts:
        if not amount.bytes:
            continue
        total = capacity(state, amount.node, amount.kind)
        free = max(0, total - held(others, amount.node, amount.kind))
        if amount.bytes > free:
            raise InsufficientMemoryError(
                f"claim {uid}: NUMA node {amount.node} {amount.kind}: wants "
                f"{binary_quantity(amount.bytes)}, {binary_quantity(free)} free"
            )


def usage(state: NodeState) -> list[tuple[int, str, int, int]]:
    """Per memory device and capacity: (node, kind, bytes claimed, bytes free)."""
    holders = (*state.records.values(), *state.draining.values())
    rows = []
    for device in state.devices.devices:
        node = device.attributes.get(ATTR_NUMA_NODE)
        if device.kind != "memory" or not isinstance(node, int):
            continue
        for name, text in device.capacity.items():
            kind = kind_of(name)
            if kind is None:
                continue
            claimed = held(holders, node, kind)
            rows.append((node, kind, claimed, max(0, int(parse_quantity(text)) - claimed)))
    return rows


def claim_memory(
    state: NodeState, request: PrepareInput
) -> tuple[tuple[MemoryAmount, ...], CPUSet]:
    """The request's memory, checked against what is free, and the NUMA nodes it lies on
    (those of every amount above 0)."""
    amounts = wanted(state, request)
    check_free(state, request.uid, amounts)
    return amounts, CPUSet(a.node for a in amounts if a.bytes)
