"""The runtime's name and version, asked of its CRI socket.

When the runtime's NRI is off the nri-plugin has nobody to ask who the runtime is; its CRI
socket still answers `runtime.v1.RuntimeService/Version` (what `crictl version` and the
kubelet call). The reply, `VersionResponse`, has four string fields: `version` (1, the CRI
API's), `runtime_name` (2, e.g. `cri-o`, `containerd`), `runtime_version` (3) and
`runtime_api_version` (4). Only those are read, through a message class built from their
descriptor, so the plugin carries no CRI protos.
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError, Message

from dracpu.core.errors import InvalidInputError

VERSION_METHOD = "/runtime.v1.RuntimeService/Version"
NAMES = {"cri-o": "CRI-O", "containerd": "containerd"}


@dataclass(frozen=True)
class RuntimeIdentity:
    name: str  # as the runtime reports it: cri-o, containerd
    version: str

    @property
    def kind(self) -> str:
        """`crio`, `containerd`, or `` for another runtime."""
        return {"cri-o": "crio", "containerd": "containerd"}.get(self.name.lower(), "")

    def __str__(self) -> str:
        return f"{NAMES.get(self.name.lower(), self.name)} {self.version}".strip()


def _version_response_class() -> type[Message]:
    """VersionResponse's four string fields as a message class of the protobuf runtime, built
    from a descriptor (the CRI protos are not carried for one reply)."""
    file = descriptor_pb2.FileDescriptorProto(name="dracpu/cri_version.proto", package="runtime.v1")
    message = file.message_type.add(name="VersionResponse")
    names = ("version", "runtime_name", "runtime_version", "runtime_api_version")
    for number, name in enumerate(names, start=1):
        message.field.add(
            name=name,
            number=number,
            type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
            label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL,
        )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("runtime.v1.VersionResponse"))


_VERSION_RESPONSE = _version_response_class()


def decode_version_response(data: bytes) -> RuntimeIdentity:
    """The runtime's name and version from a serialized VersionResponse; a reply without a
    runtime name, or not in the wire format, is refused."""
    reply = _VERSION_RESPONSE()
    try:
        reply.ParseFromString(data)
    except DecodeError as exc:
        raise InvalidInputError(f"CRI VersionResponse: {exc}") from None
    fields = {field.name: str(value) for field, value in reply.ListFields()}
    if not fields.get("runtime_name"):
        raise InvalidInputError("CRI VersionResponse names no runtime")
    return RuntimeIdentity(name=fields["runtime_name"], version=fields.get("runtime_version", ""))


async def query(socket: str, timeout: float = 3.0) -> RuntimeIdentity:
    """Ask the CRI socket (a path) for the runtime's name and version. Raises `grpc.RpcError`
    when it does not answer, `InvalidInputError` when the answer is garbled."""
    async with grpc.aio.insecure_channel(f"unix://{socket}") as channel:
        call = channel.unary_unary(VERSION_METHOD)
        reply = await call(b"", timeout=timeout)
    assert isinstance(reply, bytes)
    return decode_version_response(reply)
