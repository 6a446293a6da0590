"""The api's own metrics, and the middleware that records them.

Like every service's, they live in a registry of the api's own (dracpu.core.metrics, with the
process's standard collectors); the api merges the other services' text with it into the pod's
one /metrics answer. Labels use the route template
(`/v1/claims/{uid}`), never the raw path, so a scanner cannot grow the series count.
"""

from __future__ import annotations

import time
from typing import Any

from prometheus_client import Counter, Gauge, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from dracpu.core.metrics import exposition, service_registry

# Any other method (a scanner's invention) is counted as "other": labels stay bounded.
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
REQUEST_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)


class ApiMetrics:
    def __init__(self) -> None:
        self.registry = service_registry()
        self.requests = Counter(
            "dracpu_api_http_requests",
            "HTTP requests the api answered, by route template, method and status code.",
            ("route", "method", "code"),
            registry=self.registry,
        )
        self.duration = Histogram(
            "dracpu_api_http_request_duration_seconds",
            "Time to answer an HTTP request, by route template.",
            ("route",),
            buckets=REQUEST_BUCKETS,
            registry=self.registry,
        )
        self.backend_up = Gauge(
            "dracpu_api_backend_up",
            "1 if the service answered the api's last metrics scrape, else 0.",
            ("service",),
            registry=self.registry,
        )

    def text(self) -> str:
        return exposition(self.registry)


def _route(scope: Scope) -> str:
    route = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else "unmatched"


class MetricsMiddleware:
    """Pure ASGI middleware: counts and times every HTTP request."""

    def __init__(self, app: ASGIApp, metrics: ApiMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status: dict[str, Any] = {"code": 500}

        async def observe(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, observe)
        finally:
            route = _route(scope)
            method = scope["method"] if scope["method"] in METHODS else "other"
            self.metrics.requests.labels(route, method, str(status["code"])).inc()
            self.metrics.duration.labels(route).observe(time.perf_counter() - started)
