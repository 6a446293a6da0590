"""One running instance of a service per socket.

A container the runtime lost track of (its state `unknown` after a runtime restart on a loaded
node) can keep running while the kubelet starts the same container again: two allocators would
then write the same claim records, and two nri-plugins register with the runtime under one name,
which then refuses every container ("both tried to set CPUSetCPUs"). So a service first takes
an exclusive lock on `<socket>.lock`, beside its socket in the directory its pod's containers
share, and holds it for the life of the process: the kernel releases it when the process ends,
however it ends. A second instance waits, touching nothing (not even the socket, which the first
still serves), until the first is gone."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import os
import socket
import time
from pathlib import Path

from dracpu.core.errors import UnavailableError
from dracpu.core.log import get_logger

log = get_logger(__name__)

# How often a waiting instance tries the lock again.
POLL_SECONDS = 0.5


def lock_path(socket_path: str | os.PathLike[str]) -> Path:
    """The lock file of the service listening on `socket_path`."""
    return Path(f"{os.fspath(socket_path)}.lock")


class InstanceLock:
    """The lock of one service's socket; `acquire` waits for it, the process keeps it."""

    def __init__(self, socket_path: str | os.PathLike[str], service: str) -> None:
        self.socket = os.fspath(socket_path)
        self.path = lock_path(socket_path)
        self.service = service
        self._fd: int | None = None
        self.held = False

    @classmethod
    async def hold(cls, socket_path: str | os.PathLike[str], service: str) -> None:
        """Wait until this process holds the lock of `service` on `socket_path` (`acquire`),
        and keep it for the rest of the process: its descriptor is never closed."""
        await cls(socket_path, service).acquire()

    def _open(self) -> int:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            return os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            # The lock lives beside the socket: a folder that cannot hold it cannot hold the
            # socket either, and the operator's fix is the same.
            raise UnavailableError(
                f"cannot listen on {self.socket}: cannot create {self.path}: "
                f"{exc.strerror or exc} (mount a writable volume at {self.path.parent} or pass "
                "--socket)"
            ) from None

    def try_acquire(self) -> bool:
        """Take the lock if no other instance holds it; True once held. The file is opened
        once and kept open: a retry only asks for the lock again."""
        if self.held:
            return True
        if self._fd is None:
            self._fd = self._open()
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                return False
            raise UnavailableError(f"cannot lock {self.path}: {exc.strerror or exc}") from None
        self.held = True
        # Who holds it, for the one that waits: the container's hostname is its pod's name.
        since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        holder = f"pid {os.getpid()} on {socket.gethostname()} since {since}\n"
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, holder.encode(), 0)
        return True

    def holder(self) -> str:
        """What the instance holding the lock wrote of itself ('' when unknown)."""
        with contextlib.suppress(OSError):
            return self.path.read_text(errors="replace").strip()
        return ""

    async def acquire(self, poll: float = POLL_SECONDS) -> float:
        """Wait until this process holds the lock; the seconds it waited."""
        began = time.monotonic()
        if self.try_acquire():
            return 0.0
        log.warning(
            f"another {self.service} is running; waiting for it to end before starting",
            lock=str(self.path),
            holder=self.holder() or "unknown",
        )
        # Polled: nothing tells a process that another one's lock went away (a thread blocked
        # in flock would hold up the process's exit on SIGTERM).
        while True:
            await asyncio.sleep(poll)
            if self.try_acquire():
                break
        waited = time.monotonic() - began
        log.info(0, f"the other {self.service} ended; starting", waited_s=round(waited, 1))
        return waited

    def release(self) -> None:
        """Give the lock up (a process that ends gives it up anyway)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self.held = False
