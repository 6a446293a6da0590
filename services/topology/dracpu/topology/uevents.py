"""The kernel's announcements of CPU and NUMA node changes: uevents read from a
NETLINK_KOBJECT_UEVENT socket on the event loop, so a CPU going offline or coming back reaches
the inventory at once and nothing is read while nothing changes.

A kernel uevent is one datagram: `ACTION@DEVPATH`, then `KEY=VALUE` fields, each NUL-terminated
(lib/kobject_uevent.c). udev's own re-broadcasts start with `libudev` and are not read here.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import socket

from dracpu.core.log import get_logger

log = get_logger(__name__)

NETLINK_KOBJECT_UEVENT = 15
KERNEL_GROUP = 1  # the multicast group the kernel sends its uevents to
# The subsystems whose events may change the inventory: CPU hotplug, NUMA nodes and memory.
SUBSYSTEMS = frozenset({"cpu", "node", "memory"})
RECEIVE_BUFFER = 1 << 20


def parse(datagram: bytes) -> dict[str, str] | None:
    """A kernel uevent's fields (ACTION, DEVPATH, SUBSYSTEM, ...); None for anything else."""
    if datagram.startswith(b"libudev"):
        return None
    parts = datagram.split(b"\0")
    if not parts or b"@" not in parts[0]:
        return None
    fields: dict[str, str] = {}
    for part in parts[1:]:
        key, sep, value = part.partition(b"=")
        if sep:
            fields[key.decode(errors="replace")] = value.decode(errors="replace")
    return fields


def concerns_inventory(fields: dict[str, str]) -> bool:
    return fields.get("SUBSYSTEM") in SUBSYSTEMS


class KernelEvents:
    """`seen` is set when the kernel announced a change the inventory may follow (or when
    announcements were lost: the socket's buffer overran)."""

    def __init__(self) -> None:
        self.seen = asyncio.Event()
        self._socket: socket.socket | None = None

    def open(self) -> str:
        """Start listening on the running loop; "" when listening, else why not (no
        permission, a network namespace without uevents, no netlink at all)."""
        try:
            sock = socket.socket(
                socket.AF_NETLINK,
                socket.SOCK_DGRAM | socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC,
                NETLINK_KOBJECT_UEVENT,
            )
        except (OSError, AttributeError) as exc:
            return f"netlink uevent socket: {exc}"
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)
            sock.bind((0, KERNEL_GROUP))
        except OSError as exc:
            sock.close()
            return f"netlink uevent socket: {exc}"
        asyncio.get_running_loop().add_reader(sock.fileno(), self._read)
        self._socket = sock
        return ""

    def _read(self) -> None:
        sock = self._socket
        if sock is None:
            return
        while True:
            try:
                datagram = sock.recv(65536)
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno == errno.ENOBUFS:
                    # Events were dropped: whatever they said, look again.
                    self.seen.set()
                    continue
                log.warning("kernel uevents unreadable; relying on the periodic re-read",
                            error=str(exc))  # fmt: skip
                self.close()
                return
            fields = parse(datagram)
            if fields is not None and concerns_inventory(fields):
                log.info(4, "kernel uevent", action=fields.get("ACTION", ""),
                         devpath=fields.get("DEVPATH", ""))  # fmt: skip
                self.seen.set()

    def close(self) -> None:
        sock, self._socket = self._socket, None
        if sock is not None:
            with contextlib.suppress(RuntimeError):  # no loop running any more
                asyncio.get_running_loop().remove_reader(sock.fileno())
            sock.close()
