"""A DracpuError crossing a gRPC hop: a real grpc.aio server (`rpc.start_server`, on a unix
socket) whose handler raises it, and a client (`rpc.call` over `rpc.channel`) that raises the
same class with the same message, though classes share codes (TopologyError and ConflictError
are both FAILED_PRECONDITION). A status that names no class, or one this release does not
know, is mapped by its code, as from a peer of an older release."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import pytest
from harness.paths import short_tmp
from harness.services import served_in_process

from dracpu.core import errors, rpc
from dracpu.core.retry import RetryExhaustedError
from dracpu.pb.allocator.v1 import allocator_pb2, allocator_pb2_grpc
from dracpu.pb.topology.v1 import topology_pb2, topology_pb2_grpc

ERROR_CLASSES = sorted(
    (
        cls
        for _, cls in inspect.getmembers(errors, inspect.isclass)
        if issubclass(cls, errors.DracpuError)
    ),
    key=lambda cls: cls.__name__,
)
WHAT = "topology service"


class RaisingTopology(topology_pb2_grpc.TopologyServicer):  # type: ignore[misc]
    """GetInventory raises `error` through rpc_errors, as every servicer of the driver does;
    Rediscover answers `code` and `message` as a server knowing nothing of dracpu would."""

    def __init__(self) -> None:
        self.error: BaseException = errors.DracpuError("unset")
        self.code = grpc.StatusCode.UNKNOWN
        self.message = ""
        self.trailers: tuple[tuple[str, str], ...] = ()

    @rpc.rpc_errors
    async def GetInventory(
        self, request: topology_pb2.GetInventoryRequest, context: grpc.aio.ServicerContext
    ) -> topology_pb2.Inventory:
        raise self.error

    async def Rediscover(
        self, request: topology_pb2.RediscoverRequest, context: grpc.aio.ServicerContext
    ) -> topology_pb2.Inventory:
        await context.abort(self.code, self.message, trailing_metadata=self.trailers)
        raise AssertionError("unreachable")


@pytest.fixture
def folder() -> Iterator[Path]:
    with short_tmp("err-") as path:
        yield path


@pytest.fixture
async def served(
    folder: Path,
) -> AsyncIterator[tuple[RaisingTopology, topology_pb2_grpc.TopologyStub]]:
    servicer = RaisingTopology()
    socket = folder / "s.sock"
    add = topology_pb2_grpc.add_TopologyServicer_to_server
    async with served_in_process(socket, lambda s: add(servicer, s)) as chan:
        yield servicer, topology_pb2_grpc.TopologyStub(chan)


async def raised(pending: object) -> errors.DracpuError:
    with pytest.raises(errors.DracpuError) as caught:
        await rpc.call(pending, WHAT)  # type: ignore[arg-type]
    return caught.value


def test_every_class_of_the_hierarchy_is_covered() -> None:
    def tree(cls: type[errors.DracpuError]) -> set[type[errors.DracpuError]]:
        return {cls}.union(*(tree(sub) for sub in cls.__subclasses__()))

    ours = {cls for cls in tree(errors.DracpuError) if cls.__module__ == errors.__name__}
    assert set(ERROR_CLASSES) == ours
    assert {"TopologyError", "ConflictError", "StateError", "ProtocolError"} <= {
        cls.__name__ for cls in ours
    }


@pytest.mark.parametrize("error_class", ERROR_CLASSES, ids=lambda cls: cls.__name__)
async def test_the_client_raises_the_class_and_message_the_server_raised(
    served: tuple[RaisingTopology, topology_pb2_grpc.TopologyStub],
    error_class: type[errors.DracpuError],
) -> None:
    servicer, stub = served
    servicer.error = error_class(f"a {error_class.__name__} with 'quotes', = and\nnewline")
    error = await raised(stub.GetInventory(topology_pb2.GetInventoryRequest(), timeout=5))
    assert type(error) is error_class
    assert str(error) == f"{WHAT}: {servicer.error}"
    assert error.grpc_code == servicer.error.grpc_code


@pytest.mark.parametrize(
    ("raised_class", "arrives_as"),
    [
        (RetryExhaustedError, errors.UnavailableError),
        (type("CorruptThingError", (errors.StateError,), {}), errors.StateError),
        (type("ServiceOwnError", (errors.TopologyError,), {}), errors.TopologyError),
    ],
    ids=["core.retry", "state-subclass", "topology-subclass"],
)
async def test_a_services_own_class_arrives_as_its_nearest_core_class(
    served: tuple[RaisingTopology, topology_pb2_grpc.TopologyStub],
    raised_class: type[errors.DracpuError],
    arrives_as: type[errors.DracpuError],
) -> None:
    servicer, stub = served
    servicer.error = raised_class("the reason")
    error = await raised(stub.GetInventory(topology_pb2.GetInventoryRequest(), timeout=5))
    assert type(error) is arrives_as and str(error) == f"{WHAT}: the reason"


async def test_an_unexpected_error_arrives_as_internal_without_a_class(
    served: tuple[RaisingTopology, topology_pb2_grpc.TopologyStub],
) -> None:
    servicer, stub = served
    servicer.error = KeyError("k")
    error = await raised(stub.GetInventory(topology_pb2.GetInventoryRequest(), timeout=5))
    # INTERNAL's class by the code mapping; the message says what it was.
    assert type(error) is errors.StateError
    assert str(error) == f"{WHAT}: internal error: KeyError: 'k'"


@pytest.mark.parametrize(
    ("code", "trailers", "expected"),
    [
        (grpc.StatusCode.FAILED_PRECONDITION, (), errors.ConflictError),
        (grpc.StatusCode.INTERNAL, (), errors.StateError),
        (grpc.StatusCode.INVALID_ARGUMENT, (), errors.InvalidInputError),
        (grpc.StatusCode.UNAVAILABLE, (), errors.UnavailableError),
        (grpc.StatusCode.ABORTED, (), errors.DracpuError),
        # A class of a newer release: the code decides.
        (
            grpc.StatusCode.FAILED_PRECONDITION,
            ((rpc.ERROR_CLASS_KEY, "NewerError"),),
            errors.ConflictError,
        ),
        # A name that is ours but not of that code: not taken.
        (
            grpc.StatusCode.NOT_FOUND,
            ((rpc.ERROR_CLASS_KEY, "TopologyError"),),
            errors.NotFoundError,
        ),
        # A name that is not an error class at all.
        (grpc.StatusCode.INTERNAL, ((rpc.ERROR_CLASS_KEY, "annotations"),), errors.StateError),
        # A class and its code, from a server that is not dracpu's rpc_errors: taken.
        (
            grpc.StatusCode.FAILED_PRECONDITION,
            ((rpc.ERROR_CLASS_KEY, "TopologyError"),),
            errors.TopologyError,
        ),
    ],
    ids=[
        "no-class-failed-precondition",
        "no-class-internal",
        "no-class-invalid",
        "no-class-unavailable",
        "no-class-unmapped-code",
        "unknown-class",
        "class-of-another-code",
        "not-a-class",
        "class-and-its-code",
    ],
)
async def test_a_status_without_a_known_class_is_mapped_by_its_code(
    served: tuple[RaisingTopology, topology_pb2_grpc.TopologyStub],
    code: grpc.StatusCode,
    trailers: tuple[tuple[str, str], ...],
    expected: type[errors.DracpuError],
) -> None:
    servicer, stub = served
    servicer.code, servicer.message, servicer.trailers = code, "peer's words", trailers
    error = await raised(stub.Rediscover(topology_pb2.RediscoverRequest(), timeout=5))
    assert type(error) is expected and str(error) == f"{WHAT}: peer's words"


class RaisingPoolWatch(allocator_pb2_grpc.AllocatorServicer):  # type: ignore[misc]
    """WatchSharedPool: one pool, then a TopologyError."""

    @rpc.rpc_errors
    async def WatchSharedPool(
        self, request: allocator_pb2.WatchSharedPoolRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[allocator_pb2.SharedPool]:
        yield allocator_pb2.SharedPool(cpus="0-3")
        raise errors.TopologyError("CPU 4 went away")


async def test_a_streamed_call_keeps_the_class_too(folder: Path) -> None:
    socket = folder / "w.sock"
    server, health = await rpc.start_server(
        socket,
        lambda s: allocator_pb2_grpc.add_AllocatorServicer_to_server(RaisingPoolWatch(), s),
        service="test",
        api_version="test",
    )
    try:
        async with rpc.channel(socket) as chan:
            watch = allocator_pb2_grpc.AllocatorStub(chan).WatchSharedPool(
                allocator_pb2.WatchSharedPoolRequest(), timeout=5
            )
            pools = []
            with pytest.raises(errors.DracpuError) as caught:
                async for pool in rpc.stream(watch, "watch"):
                    pools.append(pool.cpus)
        assert pools == ["0-3"]
        assert type(caught.value) is errors.TopologyError
        assert str(caught.value) == "watch: CPU 4 went away"
    finally:
        await rpc.stop_server(server, health, socket)
