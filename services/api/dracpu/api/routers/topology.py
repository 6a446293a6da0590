"""/v1/topology: the CPU inventory as the topology service discovered it."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from dracpu.api import models, translate
from dracpu.api.replies import BACKEND_ERRORS, json_reply
from dracpu.api.state import StateDep

router = APIRouter(tags=["node"])


@router.get("/v1/topology", response_model=models.TopologyView, responses=BACKEND_ERRORS)
async def get_topology(state: StateDep) -> Response:
    """The full CPU inventory as the topology service discovered it."""
    return json_reply(translate.topology(await state.backends.topology.inventory()))
