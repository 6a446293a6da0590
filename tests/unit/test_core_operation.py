"""The operation ID across a gRPC hop: a client channel (`rpc.channel`) sends the caller's
operation, and a server (`rpc.start_server`) runs the handler as it, so the handler's log lines
carry it; a call that brings none, or one that is not a usable ID, gets a new one."""

from __future__ import annotations

import asyncio
import contextvars
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import pytest
from harness.log_lines import captured
from harness.paths import short_tmp
from harness.services import served_in_process

from dracpu.core import operation, rpc
from dracpu.core.interceptors import OPERATION_METADATA_KEY
from dracpu.core.log import get_logger
from dracpu.pb.allocator.v1 import allocator_pb2, allocator_pb2_grpc

log = get_logger(__name__)
NEW_ID = re.compile(r"[0-9a-f]{12}")


class Recording(allocator_pb2_grpc.AllocatorServicer):  # type: ignore[misc]
    """Notes the operation each handler runs as, and logs a line in it."""

    def __init__(self) -> None:
        self.seen: list[str | None] = []

    @rpc.rpc_errors
    async def GetSharedPool(
        self, request: allocator_pb2.GetSharedPoolRequest, context: grpc.aio.ServicerContext
    ) -> allocator_pb2.SharedPool:
        self.seen.append(operation.current())
        log.info(0, "pool asked")
        return allocator_pb2.SharedPool(cpus="0-1")

    @rpc.rpc_errors
    async def WatchSharedPool(
        self, request: allocator_pb2.WatchSharedPoolRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[allocator_pb2.SharedPool]:
        for cpus in ("0-1", "0-2"):
            self.seen.append(operation.current())
            yield allocator_pb2.SharedPool(cpus=cpus)


@pytest.fixture
def folder() -> Iterator[Path]:
    with short_tmp("op-") as path:
        yield path


@pytest.fixture
async def served(
    folder: Path,
) -> AsyncIterator[tuple[Recording, allocator_pb2_grpc.AllocatorStub]]:
    servicer = Recording()
    socket = folder / "a.sock"
    add = allocator_pb2_grpc.add_AllocatorServicer_to_server
    async with served_in_process(socket, lambda s: add(servicer, s)) as chan:
        yield servicer, allocator_pb2_grpc.AllocatorStub(chan)


def test_a_new_id_is_short_random_hex() -> None:
    ids = {operation.new_id() for _ in range(100)}
    assert len(ids) == 100 and all(NEW_ID.fullmatch(i) for i in ids)


async def test_the_handler_runs_as_the_callers_operation_and_logs_it(
    served: tuple[Recording, allocator_pb2_grpc.AllocatorStub],
) -> None:
    servicer, stub = served
    with captured() as lines, operation.bound("c0ffee001234"):
        await stub.GetSharedPool(allocator_pb2.GetSharedPoolRequest(), timeout=5)
    assert servicer.seen == ["c0ffee001234"]
    assert [fields["opID"] for fields in lines.said("pool asked")] == ["c0ffee001234"]


async def test_a_call_without_an_operation_gets_a_new_one_each(
    served: tuple[Recording, allocator_pb2_grpc.AllocatorStub],
) -> None:
    servicer, stub = served
    assert operation.current() is None
    for _ in range(2):
        await stub.GetSharedPool(allocator_pb2.GetSharedPoolRequest(), timeout=5)
    first, second = servicer.seen
    assert first and second and first != second
    assert NEW_ID.fullmatch(first) and NEW_ID.fullmatch(second)


@pytest.mark.parametrize("sent", ["", "a" * 65, "has space", 'quote"', "semi;colon"], ids=repr)
async def test_an_unusable_id_from_a_peer_is_replaced(
    served: tuple[Recording, allocator_pb2_grpc.AllocatorStub], sent: str
) -> None:
    servicer, stub = served
    metadata = ((OPERATION_METADATA_KEY, sent),)
    await stub.GetSharedPool(allocator_pb2.GetSharedPoolRequest(), timeout=5, metadata=metadata)
    (seen,) = servicer.seen
    assert seen is not None and NEW_ID.fullmatch(seen)


async def test_an_id_the_caller_names_in_its_metadata_is_kept(
    served: tuple[Recording, allocator_pb2_grpc.AllocatorStub],
) -> None:
    servicer, stub = served
    with operation.bound("from-context"):
        await stub.GetSharedPool(
            allocator_pb2.GetSharedPoolRequest(),
            timeout=5,
            metadata=((OPERATION_METADATA_KEY, "named-by-caller"),),
        )
    assert servicer.seen == ["named-by-caller"]


async def test_a_streamed_handler_runs_as_the_operation_throughout(
    served: tuple[Recording, allocator_pb2_grpc.AllocatorStub],
) -> None:
    servicer, stub = served
    with operation.bound("feed00000001"):
        watch = stub.WatchSharedPool(allocator_pb2.WatchSharedPoolRequest(), timeout=5)
        pools = [pool.cpus async for pool in watch]
    assert pools == ["0-1", "0-2"]
    assert servicer.seen == ["feed00000001", "feed00000001"]


async def test_the_operation_does_not_outlive_the_call_at_the_server(
    served: tuple[Recording, allocator_pb2_grpc.AllocatorStub],
) -> None:
    servicer, stub = served
    with operation.bound("aaaaaaaaaaaa"):
        await stub.GetSharedPool(allocator_pb2.GetSharedPoolRequest(), timeout=5)
    await stub.GetSharedPool(allocator_pb2.GetSharedPoolRequest(), timeout=5)
    assert servicer.seen[0] == "aaaaaaaaaaaa" and servicer.seen[1] != "aaaaaaaaaaaa"


async def test_a_generator_bound_to_an_operation_can_be_closed_from_another_task() -> None:
    async def numbers() -> AsyncIterator[int]:
        with operation.bound("0123456789ab"):
            for n in range(3):
                yield n

    generator = numbers()

    async def first() -> int:  # as a call's task iterates its handler
        return await generator.__anext__()

    assert await asyncio.create_task(first()) == 0
    # As the loop's finalizer closes an abandoned generator: in a task of its own.
    await asyncio.create_task(generator.aclose(), context=contextvars.Context())
    assert operation.current() is None
