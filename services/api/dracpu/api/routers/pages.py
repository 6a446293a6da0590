"""The HTML pages: / (links to the CPU map and every endpoint) and /ui (the CPU map)."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

from dracpu.api import models, page, translate
from dracpu.api.cpumap import ClaimCPUs, Pool, build
from dracpu.api.replies import part
from dracpu.api.state import StateDep
from dracpu.core.errors import ProtocolError

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
    inventory, pool, claims = await asyncio.gather(
        part("topology", backends.topology.inventory()),
        part("allocator", backends.allocator.shared_pool()),
        part("allocator", backends.allocator.claims()),
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
    cpu_map = build(
        node,
        allocation[0] if allocation else None,
        allocation[1] if allocation else [],
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
            )
            for c in claims.claims
        ],
    )
