"""/v1/node: the node's name, topology summary, configuration and every service's version."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter
from fastapi.responses import Response

from dracpu.api import models, translate
from dracpu.api.replies import json_reply, part, version_of
from dracpu.api.state import StateDep

router = APIRouter(tags=["node"])


@router.get("/v1/node", response_model=models.NodeView)
async def get_node(state: StateDep) -> Response:
    """Node name, topology summary, effective configuration and every service's version."""
    backends = state.backends

    async def summary() -> models.TopologySummary:
        inventory = await backends.topology.inventory()
        return translate.topology_summary(translate.machine(inventory))

    topology, versions = await asyncio.gather(
        part("topology", summary()),
        asyncio.gather(*(part(b.service, version_of(b)) for b in backends)),
    )
    return json_reply(
        models.NodeView(
            node_name=state.node_name,
            topology=topology,
            config=models.driver_config_view(state.config),
            versions=[state.own_version(), *versions],
        )
    )
