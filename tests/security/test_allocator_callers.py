"""Who may change allocation state: the allocator's own socket (mode 0600) serves every call,
for the dra-plugin and nri-plugin; the read-only socket (mode 0660, the api's) serves reads and
refuses every mutating call with PERMISSION_DENIED."""

from __future__ import annotations

import stat
from typing import Any

import grpc
import pytest
from harness.nri_bed import Allocator
from harness.requests import prepare_request

from dracpu.core.rpc import channel
from dracpu.pb.allocator.v1 import allocator_pb2 as pb
from dracpu.pb.allocator.v1 import allocator_pb2_grpc

pytestmark = pytest.mark.security

REF = pb.ContainerRef(container_id="c", pod_uid="p", pod_namespace="t", container_name="x")

MUTATING: list[tuple[str, Any]] = [
    ("Prepare", prepare_request("u")),
    ("Unprepare", pb.UnprepareRequest(claim_uid="u")),
    ("AttachContainer", pb.AttachContainerRequest(container=REF, claims={"u": "1"})),
    ("DetachContainer", pb.DetachContainerRequest(container_id="c")),
    ("Adopt", pb.AdoptRequest(container=REF, claims={"u": "1"})),
]

READS: list[tuple[str, Any]] = [
    ("ListDevices", pb.ListDevicesRequest()),
    ("ListClaims", pb.ListClaimsRequest()),
    ("GetSharedPool", pb.GetSharedPoolRequest()),
    ("GetSummary", pb.GetSummaryRequest()),
]


def read_only(allocator: Allocator) -> Any:
    return allocator.socket.with_name("allocator-ro.sock")


def test_socket_modes(allocator: Allocator) -> None:
    assert stat.S_IMODE(allocator.socket.stat().st_mode) == 0o600
    assert stat.S_IMODE(read_only(allocator).stat().st_mode) == 0o660


@pytest.mark.parametrize(("method", "request_"), MUTATING, ids=[m for m, _ in MUTATING])
async def test_the_read_only_socket_refuses_mutations(
    allocator: Allocator, method: str, request_: Any
) -> None:
    async with channel(read_only(allocator)) as chan:
        stub = allocator_pb2_grpc.AllocatorStub(chan)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await getattr(stub, method)(request_, timeout=5)
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "read-only socket" in (refused.value.details() or "")


@pytest.mark.parametrize(("method", "request_"), READS, ids=[m for m, _ in READS])
async def test_the_read_only_socket_serves_reads(
    allocator: Allocator, method: str, request_: Any
) -> None:
    uid, cpus = await allocator.prepare(2)
    async with channel(read_only(allocator)) as chan:
        stub = allocator_pb2_grpc.AllocatorStub(chan)
        await getattr(stub, method)(request_, timeout=5)
        claim = await stub.GetClaim(pb.GetClaimRequest(claim_uid=uid), timeout=5)
    assert claim.cpus == cpus.format()


def test_the_api_falls_back_to_an_older_allocators_only_socket(tmp_path: Any) -> None:
    # An allocator of the previous release serves everything on allocator.sock alone.
    from dracpu.api.backends import AllocatorBackend

    read_only_path = tmp_path / "allocator-ro.sock"
    backend = AllocatorBackend("allocator", str(read_only_path))
    assert backend.target() == str(read_only_path)  # nothing there yet: keep the given one
    (tmp_path / "allocator.sock").touch()
    assert backend.target() == str(tmp_path / "allocator.sock")
    read_only_path.touch()
    assert backend.target() == str(read_only_path)
