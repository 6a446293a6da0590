"""The allocator as the dra-plugin sees it: a few idempotent calls, retried across restarts.

Every call the plugin makes is keyed by claim UID and safe to repeat, so a call that fails
because the allocator is restarting is simply tried again (with backoff) until its deadline.
A prepare or unprepare is given the time the kubelet's own deadline leaves (see
`dracpu.dra_plugin.kubelet.call_budget`); one the allocator does not answer in that time fails with
AllocatorUnavailableError, which the kubelet sees as UNAVAILABLE and tries again.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import grpc

from dracpu.core import rpc
from dracpu.core.errors import UnavailableError
from dracpu.core.log import get_logger
from dracpu.pb.allocator.v1 import allocator_pb2, allocator_pb2_grpc

log = get_logger(__name__)
T = TypeVar("T")

# Calls made outside a kubelet request (catching up at start) wait this long.
DEFAULT_DEADLINE = 30.0
_RETRIED = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


class AllocatorUnavailableError(UnavailableError):
    """The allocator did not answer within the time the call had: try again later."""


class AllocatorClient:
    def __init__(self, socket_path: str | os.PathLike[str], deadline: float = DEFAULT_DEADLINE):
        self.socket_path = os.fspath(socket_path)
        self.deadline = deadline
        self._channel = rpc.channel(self.socket_path)
        self._stub = allocator_pb2_grpc.AllocatorStub(self._channel)

    async def close(self) -> None:
        await self._channel.close()

    async def _retry(
        self, what: str, call: Callable[[float], Awaitable[T]], deadline: float | None = None
    ) -> T:
        start = time.monotonic()
        end = start + (self.deadline if deadline is None else deadline)
        delay = 0.05
        while True:
            remaining = end - time.monotonic()
            try:
                # wait_for_ready: queue the call while the channel reconnects.
                return await call(max(remaining, 0.01))
            except grpc.aio.AioRpcError as exc:
                detail = exc.details() or exc.code().name
                if exc.code() not in _RETRIED:
                    raise rpc.error_of(exc, what) from None
                if time.monotonic() + delay >= end:
                    raise AllocatorUnavailableError(
                        f"{what} at {self.socket_path} did not answer in "
                        f"{time.monotonic() - start:.1f} s, all the time this call had "
                        f"(last: {detail}); try again"
                    ) from None
                log.info(4, "allocator call failed, retrying", call=what, error=detail)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)

    async def prepare(
        self, request: allocator_pb2.PrepareRequest, deadline: float | None = None
    ) -> allocator_pb2.PrepareResponse:
        """Prepare, waiting for the allocator at most `deadline` seconds (the client's own
        default when None)."""
        return await self._retry(
            "allocator",
            lambda t: self._stub.Prepare(request, timeout=t, wait_for_ready=True),
            deadline,
        )

    async def unprepare(
        self, claim_uid: str, deadline: float | None = None
    ) -> allocator_pb2.UnprepareResponse:
        request = allocator_pb2.UnprepareRequest(claim_uid=claim_uid)
        return await self._retry(
            "allocator",
            lambda t: self._stub.Unprepare(request, timeout=t, wait_for_ready=True),
            deadline,
        )

    async def list_devices(self, deadline: float = 5.0) -> allocator_pb2.DeviceList:
        return await self._retry(
            "allocator ListDevices",
            lambda t: self._stub.ListDevices(
                allocator_pb2.ListDevicesRequest(), timeout=t, wait_for_ready=True
            ),
            deadline,
        )

    async def list_claims(self, deadline: float = 60.0) -> allocator_pb2.ClaimList:
        return await self._retry(
            "allocator ListClaims",
            lambda t: self._stub.ListClaims(
                allocator_pb2.ListClaimsRequest(), timeout=t, wait_for_ready=True
            ),
            deadline,
        )
