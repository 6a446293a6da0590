"""/v1/claims and /v1/claims/{uid}: the claims prepared on the node."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query
from fastapi.responses import Response
from google.protobuf.message import DecodeError
from pydantic_core import to_json

from dracpu.api import models, problems, translate
from dracpu.api.replies import BACKEND_ERRORS, json_reply
from dracpu.api.state import StateDep
from dracpu.core.errors import NotFoundError, ProtocolError
from dracpu.pb.allocator.v1 import allocator_pb2

router = APIRouter(tags=["allocation"])


@router.get(
    "/v1/claims",
    response_model=models.ClaimList,
    responses={**problems.responses(422), **BACKEND_ERRORS},
)
async def list_claims(
    state: StateDep,
    namespace: Annotated[
        str | None, Query(max_length=253, description="only claims of this namespace")
    ] = None,
) -> Response:
    """Prepared claims: CPUs, devices, owner container, prepared time."""
    key = namespace or ""
    allocator = state.backends.allocator
    # Concurrent pollers share allocator calls (each started after the request arrived).
    reply = await state.claim_reads.fetch(key, lambda: allocator.claims_bytes(key))
    body = state.claim_lists.render(key, reply, _render_claim_list)
    return Response(body, media_type="application/json")


@router.get(
    "/v1/claims/{uid}",
    response_model=models.ClaimView,
    responses={**problems.responses(404, 422), **BACKEND_ERRORS},
)
async def get_claim(
    state: StateDep,
    uid: Annotated[str, Path(min_length=1, max_length=253, description="claim UID")],
) -> Response:
    """One prepared claim; 404 when no claim with this UID is prepared on the node."""
    try:
        reply = await state.backends.allocator.claim(uid)
    except NotFoundError:
        raise NotFoundError(f"claim {uid} is not prepared on this node") from None
    return json_reply(translate.claim(reply))


def _render_claim_list(reply: bytes) -> bytes:
    try:
        message = allocator_pb2.ClaimList.FromString(reply)
    except DecodeError as exc:
        raise ProtocolError(f"allocator sent an unreadable ClaimList: {exc}") from None
    return to_json(translate.claim_list_fields(message))
