"""The one error hierarchy of dracpu.

Each boundary maps these once: to a gRPC status (`dracpu.core.rpc`, which also names the class,
so a client raises the class the server raised), to an NRI/ttrpc status,
to an HTTP problem response, or to one stderr line and exit code 2 for a CLI.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import grpc


class DracpuError(Exception):
    """Base of every error dracpu raises on purpose."""

    # A grpc.StatusCode name: commands that never speak gRPC need not import it.
    grpc_status: str = "UNKNOWN"
    http_status: int = 500

    @property
    def grpc_code(self) -> grpc.StatusCode:
        import grpc

        return grpc.StatusCode[self.grpc_status]


class InvalidInputError(DracpuError, ValueError):
    """Input that can never be valid: malformed cpusets, configs, env values, API objects."""

    grpc_status = "INVALID_ARGUMENT"
    http_status = 400


class CPUSetError(InvalidInputError):
    """Text that is not a Linux CPU list."""


class ConfigError(InvalidInputError):
    """A configuration file or flag that cannot be accepted."""


class TopologyError(DracpuError):
    """The sysfs tree cannot yield a usable CPU inventory."""

    grpc_status = "FAILED_PRECONDITION"
    http_status = 500


class NotFoundError(DracpuError):
    """A claim, device or container that is not known."""

    grpc_status = "NOT_FOUND"
    http_status = 404


class ConflictError(DracpuError):
    """Valid input that contradicts recorded state (CPUs taken, claim owned elsewhere)."""

    grpc_status = "FAILED_PRECONDITION"
    http_status = 409


class ForbiddenError(DracpuError):
    """A caller or container that may not do what it asks (another pod's claim, a mutating
    call on the read-only socket)."""

    grpc_status = "PERMISSION_DENIED"
    http_status = 403


class InsufficientCPUsError(DracpuError):
    """A request that cannot be met from the CPUs that are free."""

    grpc_status = "RESOURCE_EXHAUSTED"
    http_status = 409


class InsufficientMemoryError(InsufficientCPUsError):
    """A request for a NUMA node's memory or hugepages past what its other claims leave free
    (refused like CPUs the node cannot give)."""


class UnavailableError(DracpuError):
    """A peer service or the API server cannot be reached right now."""

    grpc_status = "UNAVAILABLE"
    http_status = 503


class UnimplementedError(DracpuError):
    """The peer does not have the call: it is of an older release."""

    grpc_status = "UNIMPLEMENTED"
    http_status = 501


class StateError(DracpuError):
    """Durable state (checkpoint, CDI files) cannot be read or written."""

    grpc_status = "INTERNAL"
    http_status = 500


class ProtocolError(DracpuError):
    """A peer sent bytes that break the wire contract (frames, protobuf)."""

    grpc_status = "INTERNAL"
    http_status = 502


_BY_CODE: dict[str, type[DracpuError]] = {
    "INVALID_ARGUMENT": InvalidInputError,
    "NOT_FOUND": NotFoundError,
    "PERMISSION_DENIED": ForbiddenError,
    "FAILED_PRECONDITION": ConflictError,
    "RESOURCE_EXHAUSTED": InsufficientCPUsError,
    "UNAVAILABLE": UnavailableError,
    "DEADLINE_EXCEEDED": UnavailableError,
    "INTERNAL": StateError,
    "UNIMPLEMENTED": UnimplementedError,
}

# The classes a status can name across a gRPC hop: this module's, by name.
_BY_NAME: dict[str, type[DracpuError]] = {
    cls.__name__: cls
    for cls in list(globals().values())
    if isinstance(cls, type) and issubclass(cls, DracpuError)
}


def wire_class(exc: DracpuError) -> type[DracpuError]:
    """The class a status names for `exc`: its own, or for a class a service defines for
    itself (AllocatorUnavailableError, CorruptRecordError), the nearest one of this module,
    which every peer knows."""
    for cls in type(exc).__mro__:
        if _BY_NAME.get(cls.__name__) is cls:
            return cls
    return DracpuError


def from_grpc_code(code: grpc.StatusCode, message: str, error_class: str = "") -> DracpuError:
    """The error a client raises for a status a peer returned: the class the server named
    (`error_class`) when it is one of this module's and has that code, else the class of the
    code (a peer that names none: another program, or a dracpu release before the class
    travelled)."""
    named = _BY_NAME.get(error_class)
    if named is not None and named.grpc_status == code.name:
        return named(message)
    return _BY_CODE.get(code.name, DracpuError)(message)
