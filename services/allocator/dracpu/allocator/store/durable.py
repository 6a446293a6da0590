"""Crash-safe file replacement and removal: after these return, the change survives a power
cut or a kill -9, and readers never see a partial file."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from dracpu.core.errors import StateError

# Where the files of one `write_files` call beyond the first are written, so their fsyncs
# overlap (the disk commits them together: about half the time of one after the other).
_OVERLAP = ThreadPoolExecutor(max_workers=4, thread_name_prefix="durable-write")


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes, mode: int = 0o644, temp_suffix: str = ".tmp") -> None:
    """Write a temp file in the same directory, fsync it, rename it over `path`, fsync the
    directory. The temp name ends in `temp_suffix` so directory scanners ignore it."""
    directory = path.parent
    directory.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=directory, prefix=f".{path.name}.", suffix=temp_suffix)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temp, mode)
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    fsync_dir(directory)


@dataclass(frozen=True, slots=True)
class FileWrite:
    """One file to replace atomically: where, its bytes and mode, and what it is (for the
    error)."""

    path: Path
    data: bytes
    what: str
    mode: int = 0o644
    temp_suffix: str = ".tmp"


def write_file(file: FileWrite) -> None:
    """`write_atomic` of `file`; a failure is a StateError naming the file and the reason."""
    try:
        write_atomic(file.path, file.data, file.mode, file.temp_suffix)
    except OSError as exc:
        raise StateError(f"cannot write {file.what} {file.path}: {exc.strerror or exc}") from None


def _written(file: FileWrite) -> StateError | None:
    try:
        write_file(file)
    except StateError as exc:
        return exc
    return None


def write_files(files: Sequence[FileWrite]) -> list[StateError | None]:
    """Each file written as `write_file` writes it, all at the same time so their fsyncs
    overlap; each one's error, in order (None: durable). One failing leaves the others
    written: the caller decides what to put back."""
    others = [_OVERLAP.submit(_written, file) for file in files[1:]]
    first = [_written(files[0])] if files else []
    return first + [job.result() for job in others]


def remove_durable(path: Path) -> bool:
    """Remove `path` (absent is fine) and make the removal durable. True if it existed."""
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    fsync_dir(path.parent)
    return True


def remove_stale_temps(directory: Path, name_prefix: str, temp_suffix: str = ".tmp") -> list[str]:
    """Temp files left by writes a crash cut short (only ours: `.<name_prefix>*<suffix>`)."""
    removed: list[str] = []
    if not directory.is_dir():
        return removed
    for path in directory.glob(f".{name_prefix}*{temp_suffix}"):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
            removed.append(path.name)
    return removed
