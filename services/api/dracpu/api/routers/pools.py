"""/v1/shared-pool: the shared cpuset, and the reserved and exclusive CPUs."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from dracpu.api import models, translate
from dracpu.api.replies import BACKEND_ERRORS, json_reply
from dracpu.api.state import StateDep

router = APIRouter(tags=["allocation"])


@router.get("/v1/shared-pool", response_model=models.SharedPoolView, responses=BACKEND_ERRORS)
async def get_shared_pool(state: StateDep) -> Response:
    """The shared cpuset every container without a claim runs on, and the reserved CPUs."""
    return json_reply(translate.shared_pool(await state.backends.allocator.shared_pool()))
