"""How routes answer: a response model serialised in one pass, the part of a composite answer
that a service may leave `unavailable`, and the OpenAPI entries of a service's failures."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TypeVar

from fastapi.responses import Response
from pydantic import BaseModel

from dracpu.api import models, problems, translate
from dracpu.api.backends import Backend, BackendUnavailable
from dracpu.core.errors import ProtocolError

T = TypeVar("T")

# A route built from one service answers 503 when it is down, 502 when its reply is unusable.
BACKEND_ERRORS = problems.responses(502, 503)


def json_reply(model: BaseModel, status_code: int = 200) -> Response:
    """Serialise a response model in one pass (pydantic-core), skipping FastAPI's re-validation
    of what was just built and validated: it doubles the cost of a 1,000-claim answer."""
    return Response(
        model.model_dump_json(by_alias=True), status_code=status_code, media_type="application/json"
    )


async def part(service: str, awaitable: Awaitable[T]) -> T | models.Unavailable:
    """The answer, or an Unavailable saying why there is none."""
    try:
        return await awaitable
    except (BackendUnavailable, ProtocolError) as exc:
        return models.Unavailable(service=service, reason=str(exc))


async def version_of(backend: Backend) -> models.ServiceVersion:
    return translate.version(await backend.version())
