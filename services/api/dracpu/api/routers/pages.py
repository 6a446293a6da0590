"""The HTML pages: / (links to the CPU map and every endpoint) and /ui (the CPU map, with each
NUMA node's memory)."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

from dracpu.api import models, page, translate
from dracpu.api.cpumap import ClaimCPUs, MemoryDevice, MemoryHeld, Pool, build
from dracpu.api.replies import part
from dracpu.api.state import StateDep
from dracpu.core.driver import ATTR_NUMA_NODE, MEMORY_DEVICE_PREFIX, memory_kind
from dracpu.core.errors import InvalidInputError, ProtocolError
from dracpu.core.memory import quantity_bytes

router = APIRouter(tags=["pages"])


@router.get("/", response_class=HTMLResponse)
async def get_index(state: StateDep) -> HTMLResponse:
    """Links to the CPU map and every endpoint."""
    return HTMLResponse(page.index(state.node_name))


@router.get(
    "/ui",
    response_class=HTMLResponse,
    responses={
        503: {"description": "no usable topology", "content": {"text/html": {}}},
    },
)
async def get_ui(state: StateDep) -> HTMLResponse:
    """The CPU map: sockets, NUMA nodes, L3 groups, cores and threads, coloured by owner."""
    backends, node_name = state.backends, state.node_name
    inventory, pool, claims, devices = await asyncio.gather(
        part("topology", backends.topology.inventory()),
        part("allocator", backends.allocator.shared_pool()),
        part("allocator", backends.allocator.claims()),
        part("allocator", backends.allocator.devices()),
    )
    if isinstance(inventory, models.Unavailable):
        return HTMLResponse(page.unavailable(node_name, inventory.reason), status_code=503)
    try:
        node = translate.machine(inventory)
    except ProtocolError as exc:
        return HTMLResponse(page.unavailable(node_name, str(exc)), status_code=503)
    notices = []
    allocation: tuple[Pool, list[ClaimCPUs]] | None = None
    try:
        if isinstance(pool, models.Unavailable):
            notices.append(f"Allocation state unknown: {pool.reason}")
        elif isinstance(claims, models.Unavailable):
            notices.append(f"Allocation state unknown: {claims.reason}")
        else:
            allocation = _allocation_state(pool, claims)
    except ProtocolError as exc:
        notices.append(f"Allocation state unknown: {exc}")
    memory: list[MemoryDevice] | None = None
    if allocation is not None:
        try:
            if isinstance(devices, models.Unavailable):
                notices.append(f"Memory devices unknown: {devices.reason}")
            else:
                memory = memory_devices(devices)
        except ProtocolError as exc:
            notices.append(f"Memory devices unknown: {exc}")
    cpu_map = build(
        node,
        allocation[0] if allocation else None,
        allocation[1] if allocation else [],
        memory,
    )
    return HTMLResponse(page.cpu_map_page(node_name, cpu_map, notices))


def _allocation_state(pool: Any, claims: Any) -> tuple[Pool, list[ClaimCPUs]]:
    def parse(text: str, what: str) -> Any:
        return translate.cpuset(text, "allocator", what)

    return (
        Pool(
            shared=parse(pool.cpus, "the shared pool"),
            reserved=parse(pool.reserved, "the reserved CPUs"),
            exclusive=parse(pool.exclusive, "the exclusive CPUs"),
        ),
        [
            ClaimCPUs(
                c.uid,
                c.namespace,
                c.name,
                parse(c.cpus, f"claim {c.uid}"),
                parse(c.memory_nodes, f"claim {c.uid}'s memory nodes"),
                tuple(MemoryHeld(m.numa_node, m.kind, m.bytes) for m in c.memory),
                c.shares_pool,
            )
            for c in claims.claims
        ],
    )


def memory_devices(reply: Any) -> list[MemoryDevice]:
    """The memory devices of a ListDevices reply: each one's NUMA node and capacities in
    bytes by kind."""
    found = []
    for device in reply.devices:
        if not device.name.startswith(MEMORY_DEVICE_PREFIX):
            continue
        value = device.attributes.get(ATTR_NUMA_NODE)
        if value is None or value.WhichOneof("value") != "int" or value.int < 0:
            raise ProtocolError(f"allocator: memory device {device.name} has no NUMA node")
        node = int(value.int)
        capacity = {}
        for name, text in device.capacity.items():
            kind = memory_kind(name)
            if kind is None:
                continue
            try:
                capacity[kind] = quantity_bytes(text)
            except InvalidInputError as exc:
                raise ProtocolError(
                    f"allocator: memory device {device.name} capacity {name}: {exc}"
                ) from None
        found.append(MemoryDevice(node, capacity))
    return found
