"""The one allocator client against a real grpc.aio server on a unix socket: calls retried
until their deadline while the allocator is not there, one try where the caller wants one,
and the allocator's own reason in every error."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import TypeVar

import grpc
import pytest
from harness.paths import short_tmp as short_tmp_dir
from harness.waits import never

from dracpu.core.clients.allocator import AllocatorClient, AllocatorUnavailableError
from dracpu.core.errors import ConflictError, UnavailableError
from dracpu.pb.allocator.v1 import allocator_pb2 as pb
from dracpu.pb.allocator.v1 import allocator_pb2_grpc

T = TypeVar("T")


class Allocator(allocator_pb2_grpc.AllocatorServicer):  # type: ignore[misc]
    """Answers ListDevices and Prepare; `refuse` makes Prepare fail with that status."""

    def __init__(self) -> None:
        self.calls = 0
        self.refuse: tuple[grpc.StatusCode, str] | None = None

    async def ListDevices(
        self, request: pb.ListDevicesRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeviceList:
        self.calls += 1
        reply = pb.DeviceList()
        reply.devices.add(name="cpudev000")
        return reply

    async def Prepare(
        self, request: pb.PrepareRequest, context: grpc.aio.ServicerContext
    ) -> pb.PrepareResponse:
        self.calls += 1
        if self.refuse is not None:
            await context.abort(*self.refuse)
        return pb.PrepareResponse(claim=pb.Claim(uid=request.claim_uid, cpus="0-1"))


@pytest.fixture
def socket() -> Iterator[Path]:
    with short_tmp_dir("cl-") as path:
        yield path / "allocator.sock"


async def serve(socket: Path, servicer: Allocator) -> grpc.aio.Server:
    server = grpc.aio.server()
    allocator_pb2_grpc.add_AllocatorServicer_to_server(servicer, server)
    assert server.add_insecure_port(f"unix://{socket}") == 1
    await server.start()
    return server


@pytest.fixture
async def running(socket: Path) -> AsyncIterator[Allocator]:
    servicer = Allocator()
    server = await serve(socket, servicer)
    yield servicer
    await server.stop(None)


def connection_failed(client: AllocatorClient) -> bool:
    """The client's channel tried the socket and could not connect (it backs off and retries)."""
    state = client._connected().channel.get_state(try_to_connect=False)
    return state == grpc.ChannelConnectivity.TRANSIENT_FAILURE


async def closing(client: AllocatorClient, call: Callable[[AllocatorClient], Awaitable[T]]) -> T:
    """The call's result; the client closed after it."""
    try:
        return await call(client)
    finally:
        await client.close()


async def test_a_call_with_a_deadline_waits_for_an_allocator_that_starts_late(
    socket: Path,
) -> None:
    servicer = Allocator()
    client = AllocatorClient(socket, deadline=20.0)
    call = asyncio.create_task(closing(client, lambda c: c.list_devices()))
    # The allocator is not there yet: the channel's connection attempt fails, and the call
    # waits on.
    await never(
        call.done,
        "the call ending before the allocator is there",
        until=lambda: connection_failed(client),
    )
    server = await serve(socket, servicer)
    try:
        reply = await asyncio.wait_for(call, 15)
    finally:
        await server.stop(None)
    assert isinstance(reply, pb.DeviceList)
    assert [d.name for d in reply.devices] == ["cpudev000"]


async def test_a_call_no_allocator_answers_fails_at_its_deadline_naming_the_time_it_had(
    socket: Path,
) -> None:
    client = AllocatorClient(socket, deadline=30.0)
    started = time.monotonic()
    with pytest.raises(AllocatorUnavailableError) as caught:
        await closing(client, lambda c: c.prepare(pb.PrepareRequest(claim_uid="u1"), 0.8))
    waited = time.monotonic() - started
    assert 0.5 <= waited < 5.0  # the method's deadline, not the client's
    message = str(caught.value)
    assert f"allocator at {socket} did not answer in " in message
    assert "try again" in message
    assert isinstance(caught.value, UnavailableError)  # the kubelet sees UNAVAILABLE


async def test_the_allocators_reason_for_unavailability_is_kept_in_the_final_error(
    socket: Path, running: Allocator
) -> None:
    running.refuse = (grpc.StatusCode.UNAVAILABLE, "allocator is recovering its state")
    client = AllocatorClient(socket, deadline=0.6)
    with pytest.raises(AllocatorUnavailableError, match="allocator is recovering its state"):
        await closing(client, lambda c: c.prepare(pb.PrepareRequest(claim_uid="u1")))
    assert running.calls > 1  # retried until the deadline


async def test_a_refusal_is_not_retried_and_carries_the_allocators_reason(
    socket: Path, running: Allocator
) -> None:
    running.refuse = (grpc.StatusCode.FAILED_PRECONDITION, "CPUs 0-1 are held by claim u0")
    client = AllocatorClient(socket, deadline=10.0)
    with pytest.raises(ConflictError, match="CPUs 0-1 are held by claim u0"):
        await closing(client, lambda c: c.prepare(pb.PrepareRequest(claim_uid="u1")))
    assert running.calls == 1


async def test_without_a_deadline_a_call_is_tried_once_and_fails_at_once(socket: Path) -> None:
    client = AllocatorClient(socket, timeout=5.0, wait_for_ready=False)
    started = time.monotonic()
    with pytest.raises(UnavailableError) as caught:
        await closing(client, lambda c: c.list_devices())
    assert not isinstance(caught.value, AllocatorUnavailableError)
    assert time.monotonic() - started < 2.0


async def test_an_answered_call_returns_the_typed_reply(socket: Path, running: Allocator) -> None:
    client = AllocatorClient(socket)
    reply = await closing(client, lambda c: c.prepare(pb.PrepareRequest(claim_uid="u1")))
    assert isinstance(reply, pb.PrepareResponse)
    assert (reply.claim.uid, reply.claim.cpus) == ("u1", "0-1")


async def test_an_allocator_without_reconcile_detaches_nothing(
    socket: Path, running: Allocator
) -> None:
    client = AllocatorClient(socket)
    assert await closing(client, lambda c: c.reconcile(["c1"])) == []
