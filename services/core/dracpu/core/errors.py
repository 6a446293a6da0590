"""The one error hierarchy of dracpu.

Each boundary maps these once: to a gRPC status (`dracpu.core.rpc`), to an NRI/ttrpc status,
to an HTTP problem response, or to one stderr line and exit code 2 for a CLI.
"""

from __future__ import annotations

import grpc


class DracpuError(Exception):
    """Base of every error dracpu raises on purpose."""

    grpc_code: grpc.StatusCode = grpc.StatusCode.UNKNOWN
    http_status: int = 500


class InvalidInputError(DracpuError, ValueError):
    """Input that can never be valid: malformed cpusets, configs, env values, API objects."""

    grpc_code = grpc.StatusCode.INVALID_ARGUMENT
    http_status = 400


class CPUSetError(InvalidInputError):
    """Text that is not a Linux CPU list."""


class ConfigError(InvalidInputError):
    """A configuration file or flag that cannot be accepted."""


class TopologyError(DracpuError):
    """The sysfs tree cannot yield a usable CPU inventory."""

    grpc_code = grpc.StatusCode.FAILED_PRECONDITION
    http_status = 500


class NotFoundError(DracpuError):
    """A claim, device or container that is not known."""

    grpc_code = grpc.StatusCode.NOT_FOUND
    http_status = 404


class ConflictError(DracpuError):
    """Valid input that contradicts recorded state (CPUs taken, claim owned elsewhere)."""

    grpc_code = grpc.StatusCode.FAILED_PRECONDITION
    http_status = 409


class ForbiddenError(DracpuError):
    """A caller or container that may not do what it asks (another pod's claim, a mutating
    call on the read-only socket)."""

    grpc_code = grpc.StatusCode.PERMISSION_DENIED
    http_status = 403


class InsufficientCPUsError(DracpuError):
    """A request that cannot be met from the CPUs that are free."""

    grpc_code = grpc.StatusCode.RESOURCE_EXHAUSTED
    http_status = 409


class UnavailableError(DracpuError):
    """A peer service or the API server cannot be reached right now."""

    grpc_code = grpc.StatusCode.UNAVAILABLE
    http_status = 503


class StateError(DracpuError):
    """Durable state (checkpoint, CDI files) cannot be read or written."""

    grpc_code = grpc.StatusCode.INTERNAL
    http_status = 500


class ProtocolError(DracpuError):
    """A peer sent bytes that break the wire contract (frames, protobuf)."""

    grpc_code = grpc.StatusCode.INTERNAL
    http_status = 502


_BY_CODE: dict[grpc.StatusCode, type[DracpuError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidInputError,
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.PERMISSION_DENIED: ForbiddenError,
    grpc.StatusCode.FAILED_PRECONDITION: ConflictError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: InsufficientCPUsError,
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
    grpc.StatusCode.DEADLINE_EXCEEDED: UnavailableError,
    grpc.StatusCode.INTERNAL: StateError,
}


def from_grpc_code(code: grpc.StatusCode, message: str) -> DracpuError:
    """The error a client raises for a status a dracpu server returned."""
    return _BY_CODE.get(code, DracpuError)(message)
