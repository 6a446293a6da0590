"""The operation ID: a short random name given to one kubelet call or one NRI event, carried by
every log line written for it (key `opID`, `dracpu.core.log`) and passed on with every gRPC
call made for it (`dracpu.core.interceptors`), so one call can be followed from the service
that took it into the services it asked.

The ID lives in a context variable: asyncio tasks started while it is set inherit it, and
`asyncio.to_thread` carries it into the thread.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from contextvars import ContextVar

# 12 hex characters: short enough to read and grep, unlikely to repeat in a node's logs.
ID_BYTES = 6

# What a peer may send as an ID: a log line must not be garbled by what arrives on the wire.
_VALID = re.compile(r"[0-9A-Za-z_.-]{1,64}")

_current: ContextVar[str | None] = ContextVar("dracpu_operation", default=None)


def new_id() -> str:
    return os.urandom(ID_BYTES).hex()


def current() -> str | None:
    """The operation under way, or None outside of any."""
    return _current.get()


def valid(op_id: str) -> bool:
    """Whether a peer's ID can be taken as it is."""
    return _VALID.fullmatch(op_id) is not None


@contextmanager
def bound(op_id: str | None) -> Iterator[str | None]:
    """Run the block as operation `op_id` (None: as no operation at all)."""
    token = _current.set(op_id)
    try:
        yield op_id
    finally:
        # An async generator closed by the loop's finalizer runs this in another task's
        # context, which never had the operation set: nothing to put back there.
        with suppress(ValueError):
            _current.reset(token)


@contextmanager
def scope() -> Iterator[str]:
    """Run the block as one operation: the one already under way (the server that took the
    call gave it one), else a new one."""
    op_id = current() or new_id()
    with bound(op_id):
        yield op_id
