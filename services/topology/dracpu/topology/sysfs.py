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
    """Reads attribute files and directory listings relative to a sysfs root."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = os.fspath(root)
        self._prefix = self.root.rstrip("/") + "/"
        # Where the tree really is: a file whose real path leaves it (a symlink planted in a
        # copied or fake tree) is not read.
        self._real = os.path.realpath(self.root).rstrip("/") + "/"

    def path(self, relative: str) -> str:
        return self._prefix + relative

    def text(self, relative: str) -> str | Missing:
        """The stripped contents of a file."""
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
        try:
            return data.decode("ascii").strip()
        except UnicodeDecodeError:
            return Missing(relative, "not ASCII text")

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
        try:
            return os.listdir(self.path(relative))
        except FileNotFoundError:
            return Missing(relative, "missing")
        except OSError as exc:
            return Missing(relative, exc.strerror or type(exc).__name__)

    def is_dir(self, relative: str) -> bool:
        return os.path.isdir(self.path(relative))
