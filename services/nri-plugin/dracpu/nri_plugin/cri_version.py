"""The runtime's name and version, asked of its CRI socket.

When the runtime's NRI is off the nri-plugin has nobody to ask who the runtime is; its CRI
socket still answers `runtime.v1.RuntimeService/Version` (what `crictl version` and the
kubelet call). The reply, `VersionResponse`, has four string fields: `version` (1, the CRI
API's), `runtime_name` (2, e.g. `cri-o`, `containerd`), `runtime_version` (3) and
`runtime_api_version` (4). Only those are read, from the protobuf wire format directly, so the
plugin carries no CRI protos.
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc

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


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data) or shift > 63:
            raise InvalidInputError("CRI VersionResponse: truncated varint")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, at


def decode_version_response(data: bytes) -> RuntimeIdentity:
    """The runtime's name and version from a serialized VersionResponse; a reply without a
    runtime name, or not in the wire format, is refused."""
    strings: dict[int, str] = {}
    at = 0
    while at < len(data):
        key, at = _varint(data, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            _, at = _varint(data, at)
        elif wire == 2:
            size, at = _varint(data, at)
            if at + size > len(data):
                raise InvalidInputError("CRI VersionResponse: truncated field")
            strings[number] = data[at : at + size].decode("utf-8", "replace")
            at += size
        elif wire == 1:
            at += 8
        elif wire == 5:
            at += 4
        else:
            raise InvalidInputError(f"CRI VersionResponse: unknown wire type {wire}")
    if not strings.get(2):
        raise InvalidInputError("CRI VersionResponse names no runtime")
    return RuntimeIdentity(name=strings[2], version=strings.get(3, ""))


async def query(socket: str, timeout: float = 3.0) -> RuntimeIdentity:
    """Ask the CRI socket (a path) for the runtime's name and version. Raises `grpc.RpcError`
    when it does not answer, `InvalidInputError` when the answer is garbled."""
    async with grpc.aio.insecure_channel(f"unix://{socket}") as channel:
        call = channel.unary_unary(VERSION_METHOD)
        reply = await call(b"", timeout=timeout)
    assert isinstance(reply, bytes)
    return decode_version_response(reply)
