"""The api sidecar's FastAPI application: a read-only HTTP view of the four services.

Answers built from one service fail with 503 (a problem body naming the service) when that
service is down; composite answers (/v1/node, /v1/health, /metrics, /ui) keep the parts they
have and mark the missing ones `unavailable` with the reason. The routes live in
dracpu.api.routers, one module per resource; the state they share in dracpu.api.state.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI

from dracpu.api import models, problems
from dracpu.api.backends import Backends
from dracpu.api.metrics import MetricsMiddleware
from dracpu.api.routers import (
    claims,
    containers,
    devices,
    health,
    metrics,
    node,
    pages,
    pools,
    topology,
)
from dracpu.api.state import ApiState
from dracpu.core import __version__, footprint
from dracpu.core.config import DriverConfig
from dracpu.core.supervisor import Supervisor

# In this order in the OpenAPI document.
ROUTERS = (node, topology, devices, claims, pools, containers, health, metrics, pages)


# The api's one long-running loop: every service's health followed (`Backends.follow_health`).
LOOPS = ("health-watch",)


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    state: ApiState = app.state.api
    loops = Supervisor("api")
    loops.start("health-watch", state.backends.follow_health)
    footprint.settle()
    yield
    await loops.stop()
    await state.backends.close()


def create_app(backends: Backends, config: DriverConfig | None = None) -> FastAPI:
    config = config or DriverConfig()
    state = ApiState(backends=backends, config=config, node_name=config.node_name())
    app = FastAPI(
        title="dra.cpu node api",
        summary="Read-only view of the dra.cpu driver on one node.",
        version=__version__,
        docs_url=None,  # the bundled docs pages load assets from a CDN
        redoc_url=None,
        redirect_slashes=False,
        lifespan=_lifespan,
    )
    app.state.api = state
    problems.install(app)
    app.add_middleware(MetricsMiddleware, metrics=state.metrics)
    for module in ROUTERS:
        app.include_router(module.router)
    _document_problems(app)
    return app


def _document_problems(app: FastAPI) -> None:
    """Put the Problem schema, which routes reference by $ref, into the OpenAPI components."""
    original = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = original()
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            components["Problem"] = models.Problem.model_json_schema(
                ref_template="#/components/schemas/{model}"
            )
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
