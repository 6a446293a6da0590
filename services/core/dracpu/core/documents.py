"""Reading files and documents someone else may have written: never block on a FIFO, never read
more than a document can be, and turn every way a parser fails (invalid UTF-8, nesting deep
enough for RecursionError, numbers past Python's int-digit limit) into one precise error."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from dracpu.core.errors import DracpuError, InvalidInputError

# Configuration files, topology reports, claim records and CDI specs are all far smaller.
MAX_DOCUMENT = 16 * 1024 * 1024


def read_regular(
    path: str | os.PathLike[str],
    what: str,
    *,
    limit: int = MAX_DOCUMENT,
    error: type[DracpuError] = InvalidInputError,
) -> bytes:
    """The bytes of a regular file. A FIFO, device or directory is refused without blocking
    (opened non-blocking, checked with fstat); a file larger than `limit` is refused unread.
    FileNotFoundError passes through; other OS errors become `error`."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise error(f"{what} {os.fspath(path)}: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise error(f"{what} {os.fspath(path)}: not a regular file")
        if info.st_size > limit:
            raise error(f"{what} {os.fspath(path)}: {info.st_size} bytes, at most {limit}")
        chunks = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise error(f"{what} {os.fspath(path)}: larger than {limit} bytes")
        return b"".join(chunks)
    except OSError as exc:
        raise error(f"{what} {os.fspath(path)}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def decode(data: bytes, source: str, error: type[DracpuError] = InvalidInputError) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{source}: not valid UTF-8 (byte {exc.start})") from None


def load_json(data: bytes | str, source: str, error: type[DracpuError] = InvalidInputError) -> Any:
    try:
        return json.loads(data)
    except RecursionError:
        raise error(f"{source}: JSON nested too deeply") from None
    except UnicodeDecodeError as exc:
        raise error(f"{source}: not valid UTF-8 (byte {exc.start})") from None
    except ValueError as exc:  # JSONDecodeError, and int() past the digit limit
        raise error(f"{source}: not valid JSON ({str(exc)[:120]})") from None


def load_yaml(text: str, source: str, error: type[DracpuError] = InvalidInputError) -> Any:
    """One YAML document; `source: not valid YAML at line N` on any failure."""
    return _loaded_yaml(text, source, error, every=False)


def load_yaml_documents(
    text: str, source: str, error: type[DracpuError] = InvalidInputError
) -> list[Any]:
    """Every document of a multi-document YAML stream, empty ones left out; the errors of
    `load_yaml`."""
    loaded: list[Any] = _loaded_yaml(text, source, error, every=True)
    return loaded


def _loaded_yaml(text: str, source: str, error: type[DracpuError], *, every: bool) -> Any:
    import yaml  # only where a YAML document is read: light commands never load it

    # libyaml when present: faster, and it reports nesting errors instead of recursing.
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        if every:
            return [d for d in yaml.load_all(text, Loader=loader) if d is not None]
        return yaml.load(text, Loader=loader)
    except RecursionError:
        raise error(f"{source}: YAML nested too deeply") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise error(f"{source}: not valid YAML{where}") from None
    except ValueError as exc:  # an int past the digit limit
        raise error(f"{source}: not valid YAML ({str(exc)[:120]})") from None


def read_yaml_file(
    path: str | Path, what: str, error: type[DracpuError] = InvalidInputError
) -> Any:
    source = f"{what} {os.fspath(path)}"
    try:
        data = read_regular(path, what, error=error)
    except FileNotFoundError:
        raise error(f"{source}: No such file or directory") from None
    return load_yaml(decode(data, source, error), source, error)
