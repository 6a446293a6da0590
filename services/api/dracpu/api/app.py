"""The api sidecar's FastAPI application: a read-only HTTP view of the four services.

Answers built from one service fail with 503 (a problem body naming the service) when that
service is down; composite answers (/v1/node, /v1/health, /metrics, /ui) keep the parts they
have and mark the missing ones `unavailable` with the reason.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from typing import Annotated, Any, TypeVar

from fastapi import FastAPI, Path, Query
from fastapi.responses import HTMLResponse, PlainTextResponse, Response
from google.protobuf.message import DecodeError
from pydantic import BaseModel
from pydantic_core import to_json

from dracpu.api import models, page, problems, translate
from dracpu.api.backends import Backend, Backends, BackendUnavailable
from dracpu.api.coalesce import Coalescer
from dracpu.api.cpumap import ClaimCPUs, Pool, build
from dracpu.api.exposition import merge
from dracpu.api.metrics import ApiMetrics, MetricsMiddleware
from dracpu.api.reply_cache import ReplyCache
from dracpu.core import __version__
from dracpu.core.config import DriverConfig
from dracpu.core.errors import NotFoundError, ProtocolError
from dracpu.pb.allocator.v1 import allocator_pb2

T = TypeVar("T")

API_VERSION = "dracpu.api.v1"
METRICS_MEDIA_TYPE = "text/plain; version=0.0.4; charset=utf-8"

BACKEND_ERRORS = problems.responses(502, 503)


class MetricsResponse(PlainTextResponse):
    media_type = METRICS_MEDIA_TYPE


def _json(model: BaseModel, status_code: int = 200) -> Response:
    """Serialise a response model in one pass (pydantic-core), skipping FastAPI's re-validation
    of what was just built and validated: it doubles the cost of a 1,000-claim answer."""
    return Response(
        model.model_dump_json(by_alias=True), status_code=status_code, media_type="application/json"
    )


async def _part(service: str, awaitable: Awaitable[T]) -> T | models.Unavailable:
    """The answer, or an Unavailable saying why there is none."""
    try:
        return await awaitable
    except (BackendUnavailable, ProtocolError) as exc:
        return models.Unavailable(service=service, reason=str(exc))


def create_app(backends: Backends, config: DriverConfig | None = None) -> FastAPI:
    config = config or DriverConfig()
    node_name = config.node_name()
    api_metrics = ApiMetrics()
    claim_lists = ReplyCache()
    claim_reads: Coalescer[bytes] = Coalescer()
    started = time.time()

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        await backends.close()

    app = FastAPI(
        title="dra.cpu node api",
        summary="Read-only view of the dra.cpu driver on one node.",
        version=__version__,
        docs_url=None,  # the bundled docs pages load assets from a CDN
        redoc_url=None,
        redirect_slashes=False,
        lifespan=lifespan,
    )
    problems.install(app)
    app.add_middleware(MetricsMiddleware, metrics=api_metrics)

    def own_version() -> models.ServiceVersion:
        return models.ServiceVersion(
            service="api",
            version=__version__,
            api_version=API_VERSION,
            python_version=sys.version.split()[0],
            started_at=translate.timestamp(started),
            pid=os.getpid(),
        )

    async def version_of(backend: Backend) -> models.ServiceVersion:
        return translate.version(await backend.version())

    # ---- node and topology -------------------------------------------------------------

    @app.get("/v1/node", response_model=models.NodeView, tags=["node"])
    async def get_node() -> Response:
        """Node name, topology summary, effective configuration and every service's version."""

        async def summary() -> models.TopologySummary:
            inventory = await backends.topology.inventory()
            return translate.topology_summary(translate.machine(inventory))

        topology, versions = await asyncio.gather(
            _part("topology", summary()),
            asyncio.gather(*(_part(b.service, version_of(b)) for b in backends)),
        )
        return _json(
            models.NodeView(
                node_name=node_name,
                topology=topology,
                config=models.DriverConfigView.of(config),
                versions=[own_version(), *versions],
            )
        )

    @app.get(
        "/v1/topology", response_model=models.TopologyView, tags=["node"], responses=BACKEND_ERRORS
    )
    async def get_topology() -> Response:
        """The full CPU inventory as the topology service discovered it."""
        return _json(translate.topology(await backends.topology.inventory()))

    # ---- allocation state --------------------------------------------------------------

    @app.get(
        "/v1/devices",
        response_model=models.DevicesView,
        tags=["allocation"],
        responses=BACKEND_ERRORS,
    )
    async def get_devices() -> Response:
        """Published devices with attributes and capacity, and what prepared claims consume."""
        devices, claims, status = await asyncio.gather(
            backends.allocator.devices(),
            backends.allocator.claims(),
            _part("dra-plugin", backends.dra_plugin.status()),
        )
        publication: models.Publication | models.Unavailable = (
            status
            if isinstance(status, models.Unavailable)
            else translate.publication(status, devices.generation)
        )
        return _json(translate.devices(devices, claims, publication))

    @app.get(
        "/v1/claims",
        response_model=models.ClaimList,
        tags=["allocation"],
        responses={**problems.responses(422), **BACKEND_ERRORS},
    )
    async def list_claims(
        namespace: Annotated[
            str | None, Query(max_length=253, description="only claims of this namespace")
        ] = None,
    ) -> Response:
        """Prepared claims: CPUs, devices, owner container, prepared time."""
        key = namespace or ""
        # Concurrent pollers share allocator calls (each started after the request arrived).
        reply = await claim_reads.fetch(key, lambda: backends.allocator.claims_bytes(key))
        body = claim_lists.render(key, reply, _render_claim_list)
        return Response(body, media_type="application/json")

    @app.get(
        "/v1/claims/{uid}",
        response_model=models.ClaimView,
        tags=["allocation"],
        responses={**problems.responses(404, 422), **BACKEND_ERRORS},
    )
    async def get_claim(
        uid: Annotated[str, Path(min_length=1, max_length=253, description="claim UID")],
    ) -> Response:
        """One prepared claim; 404 when no claim with this UID is prepared on the node."""
        try:
            reply = await backends.allocator.claim(uid)
        except NotFoundError:
            raise NotFoundError(f"claim {uid} is not prepared on this node") from None
        return _json(translate.claim(reply))

    @app.get(
        "/v1/shared-pool",
        response_model=models.SharedPoolView,
        tags=["allocation"],
        responses=BACKEND_ERRORS,
    )
    async def get_shared_pool() -> Response:
        """The shared cpuset every container without a claim runs on, and the reserved CPUs."""
        return _json(translate.shared_pool(await backends.allocator.shared_pool()))

    @app.get(
        "/v1/containers",
        response_model=models.ContainerList,
        tags=["runtime"],
        responses=BACKEND_ERRORS,
    )
    async def list_containers() -> Response:
        """Containers as the NRI plugin knows them, with their cpusets."""
        return _json(translate.containers(await backends.nri_plugin.containers()))

    # ---- health ------------------------------------------------------------------------

    @app.get("/healthz", response_model=models.Liveness, tags=["health"])
    async def healthz() -> Response:
        """The api process itself answers."""
        return _json(models.Liveness())

    @app.get(
        "/readyz",
        response_model=models.Readiness,
        tags=["health"],
        responses={503: {"model": models.Readiness, "description": "some service is not ready"}},
    )
    async def readyz() -> Response:
        """Ready when every service answers SERVING on its gRPC health service."""
        statuses = await asyncio.gather(*(_health(b) for b in backends))
        services = {b.service: status for b, status in zip(backends, statuses, strict=True)}
        ready = all(status == "SERVING" for status in statuses)
        body = models.Readiness(ready=ready, services=services)
        return _json(body, status_code=200 if ready else 503)

    @app.get("/v1/health", response_model=models.HealthView, tags=["health"])
    async def get_health() -> Response:
        """Per service: gRPC health, version, socket, last error; kubelet and runtime links."""
        listed = list(backends)
        statuses, versions, registration, runtime = await asyncio.gather(
            asyncio.gather(*(_health(b) for b in listed)),
            asyncio.gather(*(_part(b.service, version_of(b)) for b in listed)),
            _part("dra-plugin", backends.dra_plugin.status()),
            _part("nri-plugin", backends.nri_plugin.status()),
        )
        return _json(
            models.HealthView(
                api=own_version(),
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
            )
        )

    # ---- metrics -----------------------------------------------------------------------

    @app.get(
        "/metrics",
        response_class=MetricsResponse,
        tags=["health"],
        responses={
            200: {
                "description": "Prometheus text exposition 0.0.4 of every service and the api",
                "content": {"text/plain": {"schema": {"type": "string"}}},
            }
        },
    )
    async def get_metrics() -> MetricsResponse:
        """Every service's metrics (GetMetrics) and the api's own, one HELP/TYPE per family."""
        listed = list(backends)
        texts = await asyncio.gather(*(_part(b.service, b.metrics()) for b in listed))
        sources: list[tuple[str, str]] = []
        for backend, text in zip(listed, texts, strict=True):
            up = not isinstance(text, models.Unavailable)
            api_metrics.backend_up.labels(backend.service).set(1 if up else 0)
            if isinstance(text, str):
                sources.append((backend.service, text))
        sources.append(("api", api_metrics.text()))
        return MetricsResponse(merge(sources))

    # ---- pages -------------------------------------------------------------------------

    @app.get("/", response_class=HTMLResponse, tags=["pages"])
    async def get_index() -> HTMLResponse:
        """Links to the CPU map and every endpoint."""
        return HTMLResponse(page.index(node_name))

    @app.get(
        "/ui",
        response_class=HTMLResponse,
        tags=["pages"],
        responses={
            503: {"description": "no usable topology", "content": {"text/html": {}}},
        },
    )
    async def get_ui() -> HTMLResponse:
        """The CPU map: sockets, NUMA nodes, L3 groups, cores and threads, coloured by owner."""
        inventory, pool, claims = await asyncio.gather(
            _part("topology", backends.topology.inventory()),
            _part("allocator", backends.allocator.shared_pool()),
            _part("allocator", backends.allocator.claims()),
        )
        if isinstance(inventory, models.Unavailable):
            return HTMLResponse(page.unavailable(node_name, inventory.reason), status_code=503)
        try:
            node = translate.machine(inventory)
        except ProtocolError as exc:
            return HTMLResponse(page.unavailable(node_name, str(exc)), status_code=503)
        notices = []
        state: tuple[Pool, list[ClaimCPUs]] | None = None
        try:
            if isinstance(pool, models.Unavailable):
                notices.append(f"Allocation state unknown: {pool.reason}")
            elif isinstance(claims, models.Unavailable):
                notices.append(f"Allocation state unknown: {claims.reason}")
            else:
                state = _allocation_state(pool, claims)
        except ProtocolError as exc:
            notices.append(f"Allocation state unknown: {exc}")
        cpu_map = build(node, state[0] if state else None, state[1] if state else [])
        return HTMLResponse(page.cpu_map_page(node_name, cpu_map, notices))

    _document_problems(app)
    return app


def _render_claim_list(reply: bytes) -> bytes:
    try:
        message = allocator_pb2.ClaimList.FromString(reply)
    except DecodeError as exc:
        raise ProtocolError(f"allocator sent an unreadable ClaimList: {exc}") from None
    return to_json(translate.claim_list_fields(message))


async def _health(backend: Backend) -> str:
    try:
        return await backend.health()
    except (BackendUnavailable, NotFoundError):
        return "UNAVAILABLE"


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
            ClaimCPUs(c.uid, c.namespace, c.name, parse(c.cpus, f"claim {c.uid}"))
            for c in claims.claims
        ],
    )


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
