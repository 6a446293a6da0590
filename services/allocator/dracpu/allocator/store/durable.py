"""Crash-safe file replacement and removal: after these return, the change survives a power
cut or a kill -9, and readers never see a partial file."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


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
