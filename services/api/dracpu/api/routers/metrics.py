"""/metrics: every service's Prometheus text and the api's own, merged into one exposition."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter
from fastapi.responses import PlainTextResponse

from dracpu.api import models
from dracpu.api.exposition import merge
from dracpu.api.replies import part
from dracpu.api.state import StateDep

METRICS_MEDIA_TYPE = "text/plain; version=0.0.4; charset=utf-8"

router = APIRouter(tags=["health"])


class MetricsResponse(PlainTextResponse):
    media_type = METRICS_MEDIA_TYPE


@router.get(
    "/metrics",
    response_class=MetricsResponse,
    responses={
        200: {
            "description": "Prometheus text exposition 0.0.4 of every service and the api",
            "content": {"text/plain": {"schema": {"type": "string"}}},
        }
    },
)
async def get_metrics(state: StateDep) -> MetricsResponse:
    """Every service's metrics (GetMetrics) and the api's own, one HELP/TYPE per family."""
    listed = list(state.backends)
    texts = await asyncio.gather(*(part(b.service, b.metrics()) for b in listed))
    sources: list[tuple[str, str]] = []
    for backend, text in zip(listed, texts, strict=True):
        up = not isinstance(text, models.Unavailable)
        state.metrics.backend_up.labels(backend.service).set(1 if up else 0)
        if isinstance(text, str):
            sources.append((backend.service, text))
    sources.append(("api", state.metrics.text()))
    return MetricsResponse(merge(sources))
