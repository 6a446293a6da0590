"""/v1/devices: the published devices and what prepared claims consume of them."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter
from fastapi.responses import Response

from dracpu.api import models, translate
from dracpu.api.replies import BACKEND_ERRORS, json_reply, part
from dracpu.api.state import StateDep

router = APIRouter(tags=["allocation"])


@router.get("/v1/devices", response_model=models.DevicesView, responses=BACKEND_ERRORS)
async def get_devices(state: StateDep) -> Response:
    """Published devices with attributes and capacity, and what prepared claims consume."""
    backends = state.backends
    devices, claims, status = await asyncio.gather(
        backends.allocator.devices(),
        backends.allocator.claims(),
        part("dra-plugin", backends.dra_plugin.status()),
    )
    publication: models.Publication | models.Unavailable = (
        status
        if isinstance(status, models.Unavailable)
        else translate.publication(status, devices.generation)
    )
    return json_reply(translate.devices(devices, claims, publication))
