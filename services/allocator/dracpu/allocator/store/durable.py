"""The allocator's state files: each replaced whole (`dracpu.core.files.write_atomic`), durably
unless the file says otherwise."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dracpu.core.errors import StateError
from dracpu.core.files import TEMP_SUFFIX, write_atomic


@dataclass(frozen=True, slots=True)
class FileWrite:
    """One file to replace atomically: where, its bytes and mode, what it is (for the error),
    and whether it must be on disk when the write returns."""

    path: Path
    data: bytes
    what: str
    mode: int = 0o644
    temp_suffix: str = TEMP_SUFFIX
    durable: bool = True


def write_file(file: FileWrite) -> None:
    """`file` replaced whole, and on disk when it says durable (a prepare is acknowledged only
    once its record is); a failure is a StateError naming the file and the reason."""
    try:
        write_atomic(
            file.path,
            file.data,
            durable=file.durable,
            mode=file.mode,
            temp_suffix=file.temp_suffix,
        )
    except OSError as exc:
        raise StateError(f"cannot write {file.what} {file.path}: {exc.strerror or exc}") from None


def _written(file: FileWrite) -> StateError | None:
    try:
        write_file(file)
    except StateError as exc:
        return exc
    return None


def write_files(files: Sequence[FileWrite]) -> list[StateError | None]:
    """Each file written as `write_file` writes it, one after another in the calling thread
    (a prepare syncs one file, its record: nothing to overlap); each one's error, in order
    (None: written). One failing leaves the others written: the caller decides what to put
    back."""
    return [_written(file) for file in files]
