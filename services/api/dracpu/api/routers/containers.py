"""/v1/containers: the containers the NRI plugin knows, with their cpusets."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from dracpu.api import models, translate
from dracpu.api.replies import BACKEND_ERRORS, json_reply
from dracpu.api.state import StateDep

router = APIRouter(tags=["runtime"])


@router.get("/v1/containers", response_model=models.ContainerList, responses=BACKEND_ERRORS)
async def list_containers(state: StateDep) -> Response:
    """Containers as the NRI plugin knows them, with their cpusets."""
    return json_reply(translate.containers(await state.backends.nri_plugin.containers()))
