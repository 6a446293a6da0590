"""Where the services listen: default unix socket paths and the checks every command line
applies to a socket flag. Kept apart from the gRPC plumbing so parsing arguments needs no gRPC."""

from __future__ import annotations

import os
import stat
from typing import Final

from dracpu.core.errors import InvalidInputError

# sun_path is 108 bytes including the terminating NUL.
MAX_SOCKET_PATH = 107


def socket_file(service: str) -> str:
    """The file name of a service's gRPC socket, in whichever directory holds the sockets."""
    return f"{service}.sock"


# The allocator's second socket, next to its own one: reads only, for the api.
ALLOCATOR_READ_ONLY_SOCKET: Final = "allocator-ro.sock"

DEFAULT_RUN_DIR = "/run/dracpu"
DEFAULT_SOCKETS = {
    service: f"{DEFAULT_RUN_DIR}/{socket_file(service)}"
    for service in ("topology", "allocator", "dra-plugin", "nri-plugin")
}


def check_socket_path(path: str | os.PathLike[str]) -> str:
    text = os.fspath(path)
    size = len(text.encode())
    if size > MAX_SOCKET_PATH:
        raise InvalidInputError(
            f"unix socket path {text} is {size} bytes; the limit is {MAX_SOCKET_PATH}"
        )
    try:
        kind = os.lstat(text).st_mode
    except OSError:
        return text
    if not stat.S_ISSOCK(kind):
        raise InvalidInputError(
            f"unix socket path {text} exists and is not a socket; refusing to replace it"
        )
    return text
