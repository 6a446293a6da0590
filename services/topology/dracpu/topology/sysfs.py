"""Reading a sysfs tree without ever raising on odd contents.

Every read answers a value or `None` plus the reason it failed, so discovery decides what a
missing or garbled file means (skip the CPU, use a default) and can say why.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass

from dracpu.core.cpuset import CPUSet
from dracpu.core.errors import CPUSetError
from dracpu.topology.overlay import SysfsOverlay

# Sysfs attribute files are at most a page; a larger read is not a sysfs file.
_MAX_READ = 65536


@dataclass(frozen=True, slots=True)
class Missing:
    """Why a value could not be read: `path: reason`."""

    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


class SysfsReader:
    """Reads attribute files and directory listings relative to a sysfs root, with the
    overlay's files and directories (if any) in front of the real tree."""

    def __init__(self, root: str | os.PathLike[str], overlay: SysfsOverlay | None = None) -> None:
        self.root = os.fspath(root)
        self.overlay = overlay or SysfsOverlay()
        self._prefix = self.root.rstrip("/") + "/"
        # Where the tree really is: a file whose real path leaves it (a symlink planted in a
        # copied or fake tree) is not read.
        self._real = os.path.realpath(self.root).rstrip("/") + "/"

    def path(self, relative: str) -> str:
        return self._prefix + relative

    def text(self, relative: str) -> str | Missing:
        """The stripped contents of a file."""
        if self.overlay.is_file(relative):
            return _ascii(relative, self.overlay.files[relative])
        if self.overlay.is_dir(relative):
            return Missing(relative, os.strerror(errno.EISDIR))
        # os.open/os.read: discovery reads thousands of tiny files, and buffered file objects
        # cost more than the read itself.
        try:
            # Non-blocking, then fstat: a FIFO is refused instead of waiting for a writer.
            fd = os.open(self._prefix + relative, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
            try:
                mode = os.fstat(fd).st_mode
                if stat.S_ISDIR(mode):
                    return Missing(relative, os.strerror(errno.EISDIR))
                if not stat.S_ISREG(mode):
                    return Missing(relative, "not a regular file")
                if not self._inside(fd):
                    return Missing(relative, "leads outside the sysfs tree")
                data = os.read(fd, _MAX_READ)
            finally:
                os.close(fd)
        except FileNotFoundError:
            return Missing(relative, "missing")
        except OSError as exc:
            return Missing(relative, exc.strerror or type(exc).__name__)
        return _ascii(relative, data)

    def _inside(self, fd: int) -> bool:
        try:
            real = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return True  # no /proc: nothing to check against
        return real.startswith(self._real)

    def integer(self, relative: str) -> int | Missing:
        text = self.text(relative)
        if isinstance(text, Missing):
            return text
        try:
            return int(text, 10)
        except ValueError:
            return Missing(relative, f"not an integer: {text[:40]!r}")

    def cpuset(self, relative: str) -> CPUSet | Missing:
        text = self.text(relative)
        if isinstance(text, Missing):
            return text
        try:
            return CPUSet.parse(text)
        except CPUSetError as exc:
            return Missing(relative, str(exc))

    def listdir(self, relative: str) -> list[str] | Missing:
        if self.overlay.is_file(relative):
            return Missing(relative, os.strerror(errno.ENOTDIR))
        try:
            base = os.listdir(self.path(relative))
        except OSError as exc:
            gone = isinstance(exc, FileNotFoundError | NotADirectoryError)
            if gone and self.overlay.is_dir(relative):
                return self.overlay.merge_listing(relative, [])
            if isinstance(exc, FileNotFoundError):
                return Missing(relative, "missing")
            return Missing(relative, exc.strerror or type(exc).__name__)
        if self.overlay.is_dir(relative):
            return self.overlay.merge_listing(relative, base)
        return base

    def is_dir(self, relative: str) -> bool:
        if self.overlay.is_file(relative):
            return False
        return self.overlay.is_dir(relative) or os.path.isdir(self.path(relative))


def _ascii(relative: str, data: bytes) -> str | Missing:
    try:
        return data.decode("ascii").strip()
    except UnicodeDecodeError:
        return Missing(relative, "not ASCII text")
