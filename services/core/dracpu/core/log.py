"""Structured key=value logging with the reference driver's verbosity levels.

Level 0 is always shown (errors, warnings, start-up facts), 2 covers decisions and lifecycle,
4 allocation internals, 6 debugging. `-v N` shows every line at level <= N.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any


class _State:
    verbosity = 0
    service = "dracpu"


_state = _State()
_root = logging.getLogger("dracpu")


def _quote(value: Any) -> str:
    text = str(value)
    if text == "" or any(c in text for c in ' ="\n\t'):
        escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        return f'"{escaped}"'
    return text


def format_fields(fields: dict[str, Any]) -> str:
    return " ".join(f"{key}={_quote(value)}" for key, value in fields.items())


class _Formatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        fields: dict[str, Any] = {
            "ts": f"{stamp}.{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "v": getattr(record, "verbosity", 0),
            "service": _state.service,
            "logger": record.name.removeprefix("dracpu."),
            "msg": record.getMessage(),
        }
        fields.update(getattr(record, "fields", {}))
        line = format_fields(fields)
        if record.exc_info and _state.verbosity >= 6:
            line += "\n" + self.formatException(record.exc_info)
        return line


def setup(verbosity: int = 0, service: str = "dracpu", stream: Any = None) -> None:
    """Configure logging once per process."""
    if not 0 <= verbosity <= 10:
        raise ValueError(f"verbosity must be 0-10, got {verbosity}")
    _state.verbosity = verbosity
    _state.service = service
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(_Formatter())
    _root.handlers[:] = [handler]
    _root.setLevel(logging.DEBUG)
    _root.propagate = False


def verbosity() -> int:
    return _state.verbosity


class Logger:
    """A named logger whose calls take an event message and key=value fields."""

    def __init__(self, name: str) -> None:
        self._logger = _root.getChild(name)

    def enabled(self, level: int) -> bool:
        return level <= verbosity()

    def _emit(self, pylevel: int, v: int, msg: str, fields: dict[str, Any], exc: bool) -> None:
        if v > verbosity():
            return
        self._logger.log(pylevel, msg, extra={"verbosity": v, "fields": fields}, exc_info=exc)

    def info(self, v: int, msg: str, **fields: Any) -> None:
        """An informational line shown at verbosity >= v."""
        self._emit(logging.INFO, v, msg, fields, False)

    def warning(self, msg: str, **fields: Any) -> None:
        self._emit(logging.WARNING, 0, msg, fields, False)

    def error(self, msg: str, *, exc_info: bool = False, **fields: Any) -> None:
        self._emit(logging.ERROR, 0, msg, fields, exc_info)


def get_logger(name: str) -> Logger:
    """The logger of a module: `get_logger(__name__)` everywhere, so a line's `logger` field is
    the module that wrote it, without the `dracpu.` prefix (`allocator.node`)."""
    return Logger(name.removeprefix("dracpu."))
