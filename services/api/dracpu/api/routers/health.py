"""/healthz, /readyz and /v1/health: the api's liveness, the services' readiness, and each
service's health, version, socket and last error with the kubelet and runtime links and the
prerequisites the plugins judged."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter
from fastapi.responses import Response

from dracpu.api import models, translate
from dracpu.api.backends import Backend, BackendUnavailable
from dracpu.api.replies import json_reply, part, version_of
from dracpu.api.state import StateDep
from dracpu.core.errors import NotFoundError

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=models.Liveness)
async def healthz() -> Response:
    """The api process itself answers."""
    return json_reply(models.Liveness())


@router.get(
    "/readyz",
    response_model=models.Readiness,
    responses={503: {"model": models.Readiness, "description": "some service is not ready"}},
)
async def readyz(state: StateDep) -> Response:
    """Ready when every service answers SERVING on its gRPC health service; a service that
    answers NOT_SERVING is asked which of its loops keep it so."""
    backends = list(state.backends)
    statuses = await asyncio.gather(*(_health(b) for b in backends))
    services = {b.service: status for b, status in zip(backends, statuses, strict=True)}
    ready = all(status == "SERVING" for status in statuses)
    unready = [b for b, status in zip(backends, statuses, strict=True) if status == "NOT_SERVING"]
    loops = [
        loop for found in await asyncio.gather(*map(_unready_loops, unready)) for loop in found
    ]
    body = models.Readiness(ready=ready, services=services, loops=loops)
    return json_reply(body, status_code=200 if ready else 503)


@router.get("/v1/health", response_model=models.HealthView)
async def get_health(state: StateDep) -> Response:
    """Per service: gRPC health, version, socket, last error; kubelet and runtime links; the
    prerequisites the dra-plugin and the nri-plugin judged."""
    backends = state.backends
    listed = list(backends)
    statuses, versions, registration, runtime = await asyncio.gather(
        asyncio.gather(*(_health(b) for b in listed)),
        asyncio.gather(*(part(b.service, version_of(b)) for b in listed)),
        part("dra-plugin", backends.dra_plugin.status()),
        part("nri-plugin", backends.nri_plugin.status()),
    )
    return json_reply(
        models.HealthView(
            api=state.own_version(),
            services=[
                models.ServiceHealth(
                    service=b.service,
                    socket=b.socket,
                    status=status,
                    version=version,
                    last_error=b.last_error,
                    last_error_at=translate.timestamp(b.last_error_at or 0),
                )
                for b, status, version in zip(listed, statuses, versions, strict=True)
            ],
            kubelet_registration=(
                registration
                if isinstance(registration, models.Unavailable)
                else translate.kubelet_registration(registration)
            ),
            runtime=(
                runtime
                if isinstance(runtime, models.Unavailable)
                else translate.runtime_connection(runtime)
            ),
            prerequisites=[
                *_prerequisites("dra-plugin", registration),
                *_prerequisites("nri-plugin", runtime),
            ],
        )
    )


def _prerequisites(service: str, reply: object) -> list[models.Prerequisite]:
    if isinstance(reply, models.Unavailable):
        return []
    return translate.prerequisites(service, reply)


async def _unready_loops(backend: Backend) -> list[models.UnreadyLoop]:
    try:
        reply = await backend.loops()
    except (BackendUnavailable, NotFoundError):
        return []  # a service of an older release has no GetLoops; its status says enough
    return [
        models.UnreadyLoop(
            service=backend.service,
            loop=loop.name,
            state=loop.state,
            restarts=loop.restarts,
            failures_in_row=loop.failures_in_row,
            last_error=loop.last_error,
            last_error_at=translate.timestamp(loop.last_error_at_unix),
        )
        for loop in reply.loops
        if not loop.ready
    ]


async def _health(backend: Backend) -> str:
    """The status the service pushed last, or, with no health watch open, asked now."""
    if backend.pushed_health is not None:
        return backend.pushed_health
    try:
        return await backend.health()
    except (BackendUnavailable, NotFoundError):
        return "UNAVAILABLE"
