"""HTTP problem responses (RFC 9457, application/problem+json): the one place where errors
become HTTP answers. A traceback never reaches a client."""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from dracpu.api.backends import BackendUnavailable
from dracpu.api.models import Problem
from dracpu.core.errors import DracpuError
from dracpu.core.log import get_logger

log = get_logger(__name__)

MEDIA_TYPE = "application/problem+json"


class ProblemResponse(JSONResponse):
    media_type = MEDIA_TYPE


def problem(
    status: int,
    detail: str,
    *,
    instance: str | None = None,
    service: str | None = None,
    headers: dict[str, str] | None = None,
) -> ProblemResponse:
    body = Problem(
        title=HTTPStatus(status).phrase,
        status=status,
        detail=detail,
        instance=instance,
        service=service,
    )
    return ProblemResponse(body.model_dump(exclude_none=True), status, headers=headers)


def responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI entries for the problem answers a route can give."""
    return {
        status: {
            "description": HTTPStatus(status).phrase,
            "content": {MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}},
        }
        for status in statuses
    }


def _describe_validation(exc: RequestValidationError) -> str:
    parts = []
    for error in exc.errors():
        where = ".".join(str(part) for part in error.get("loc", ()))
        parts.append(f"{where}: {error.get('msg', 'invalid')}")
    return "; ".join(parts) or "invalid request"


def install(app: FastAPI) -> None:
    """Register the handlers that turn every error into a problem response."""

    async def on_http(request: Request, exc: Exception) -> ProblemResponse:
        assert isinstance(exc, HTTPException)
        headers = dict(exc.headers) if exc.headers else None
        detail = exc.detail if isinstance(exc.detail, str) else HTTPStatus(exc.status_code).phrase
        if exc.status_code == 404 and detail == "Not Found":
            detail = f"no resource at {request.url.path}"
        elif exc.status_code == 405:
            detail = f"{request.method} is not allowed on {request.url.path}; the api is read-only"
        return problem(exc.status_code, detail, instance=request.url.path, headers=headers)

    async def on_validation(request: Request, exc: Exception) -> ProblemResponse:
        assert isinstance(exc, RequestValidationError)
        return problem(422, _describe_validation(exc), instance=request.url.path)

    async def on_dracpu(request: Request, exc: Exception) -> ProblemResponse:
        assert isinstance(exc, DracpuError)
        service = exc.service if isinstance(exc, BackendUnavailable) else None
        return problem(exc.http_status, str(exc), instance=request.url.path, service=service)

    async def on_unexpected(request: Request, exc: Exception) -> ProblemResponse:
        log.error("unexpected error", path=request.url.path, error=repr(exc), exc_info=True)
        return problem(500, f"internal error: {type(exc).__name__}", instance=request.url.path)

    app.add_exception_handler(HTTPException, on_http)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(DracpuError, on_dracpu)
    app.add_exception_handler(Exception, on_unexpected)
