"""Logging in the Kubernetes formats, with the reference driver's verbosity levels.

Level 0 is always shown (errors, warnings, start-up facts), 2 covers decisions and lifecycle,
4 allocation internals, 6 debugging. `-v N` shows every line at level <= N.

Formats (`--logging-format`):
- `text` (default): klog's text format, one line per event:
  `I1201 18:45:58.891023   20886 node.py:498] "claim prepared" logger="allocator.node" cpus="0-3"`
  (severity letter I/W/E, month and day, UTC time to the microsecond, the pid padded to 7,
  file:line of the call, the quoted message, then key=value pairs: strings quoted, numbers and
  booleans bare).
- `json`: component-base's JSON format, one object per line: `ts` (milliseconds since the
  epoch, a float), `caller` (file:line), `msg`, `v` (verbosity; absent on errors, which carry
  `err` when the event has one), then the key/values.
- `logfmt`: `ts=... level=... v=... service=... logger=... msg=...`, for people reading a
  local run (the dev runner uses it).

A line written while an operation is under way (`dracpu.core.operation`: one kubelet call, one
NRI event, and the gRPC calls made for it) carries its ID as the key `opID`, first after
`logger`, in every format.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from typing import Any, Literal

from dracpu.core import operation

LogFormat = Literal["text", "json", "logfmt"]
FORMATS: tuple[LogFormat, ...] = ("text", "json", "logfmt")
# The key of the operation ID on every line logged during one.
OPERATION_KEY = "opID"
_SEVERITY = {logging.INFO: "I", logging.WARNING: "W", logging.ERROR: "E", logging.CRITICAL: "F"}


class _State:
    verbosity = 0
    service = "dracpu"
    format: LogFormat = "text"
    handler: logging.Handler | None = None


_state = _State()
_root = logging.getLogger("dracpu")


def _quote(value: Any) -> str:
    text = str(value)
    if text == "" or any(c in text for c in ' ="\n\t'):
        escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        return f'"{escaped}"'
    return text


def format_fields(fields: dict[str, Any]) -> str:
    """logfmt: `key=value` pairs, values quoted only when they must be."""
    return " ".join(f"{key}={_quote(value)}" for key, value in fields.items())


def go_quote(text: str) -> str:
    """A string as Go's strconv.Quote writes it (klog quotes messages and string values so)."""
    out = ['"']
    for char in text:
        code = ord(char)
        if char in ('"', "\\"):
            out.append("\\" + char)
        elif char == "\n":
            out.append("\\n")
        elif char == "\t":
            out.append("\\t")
        elif char == "\r":
            out.append("\\r")
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


def _klog_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if value is None:
        return "<nil>"
    return go_quote(str(value))


def _json_value(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [_json_value(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _json_value(item) for key, item in value.items()}
    return str(value)


class _Formatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        if hasattr(record, "fields"):
            fields: dict[str, Any] = dict(record.fields)
        else:
            # A library's line: formatted where it was logged, so the operation is the caller's.
            op_id = operation.current()
            fields = {OPERATION_KEY: op_id} if op_id else {}
        if record.exc_info and _state.verbosity >= 6:
            fields["stacktrace"] = self.formatException(record.exc_info)
        if _state.format == "json":
            return self._json(record, fields)
        if _state.format == "logfmt":
            return self._logfmt(record, fields)
        return self._klog(record, fields)

    @staticmethod
    def _logger(record: logging.LogRecord) -> str:
        return record.name.removeprefix("dracpu.")  # a library's logger keeps its own name

    def _klog(self, record: logging.LogRecord, fields: dict[str, Any]) -> str:
        stamp = time.strftime("%m%d %H:%M:%S", time.gmtime(record.created))
        micros = int((record.created % 1) * 1_000_000)
        head = (
            f"{_SEVERITY.get(record.levelno, 'I')}{stamp}.{micros:06d} {os.getpid():7d} "
            f"{os.path.basename(record.pathname)}:{record.lineno}] "
        )
        pairs = {"logger": self._logger(record), **fields}
        body = " ".join(f"{key}={_klog_value(value)}" for key, value in pairs.items())
        return f"{head}{go_quote(record.getMessage())} {body}"

    def _json(self, record: logging.LogRecord, fields: dict[str, Any]) -> str:
        entry: dict[str, Any] = {
            "ts": round(record.created * 1000, 3),
            "caller": f"{os.path.basename(record.pathname)}:{record.lineno}",
            "msg": record.getMessage(),
        }
        if record.levelno < logging.ERROR:
            entry["v"] = getattr(record, "verbosity", 0)
        entry["logger"] = self._logger(record)
        for key, value in fields.items():
            entry.setdefault(key, _json_value(value))
        return json.dumps(entry, separators=(",", ":"))

    def _logfmt(self, record: logging.LogRecord, fields: dict[str, Any]) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        head: dict[str, Any] = {
            "ts": f"{stamp}.{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "v": getattr(record, "verbosity", 0),
            "service": _state.service,
            "logger": self._logger(record),
            "msg": record.getMessage(),
        }
        return format_fields(head | fields)


def setup(
    verbosity: int = 0, service: str = "dracpu", stream: Any = None, fmt: LogFormat = "text"
) -> None:
    """Configure logging once per process."""
    if not 0 <= verbosity <= 10:
        raise ValueError(f"verbosity must be 0-10, got {verbosity}")
    if fmt not in FORMATS:
        raise ValueError(f"logging format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    _state.verbosity = verbosity
    _state.service = service
    _state.format = fmt
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(_Formatter())
    _root.handlers[:] = [handler]
    _root.setLevel(logging.DEBUG)
    _root.propagate = False
    # Libraries' own warnings (asyncio, grpc, uvicorn) come out in the same format: the
    # handler replaces the one an earlier setup put on Python's root logger (whose level,
    # WARNING unless someone changed it, keeps their chatter out), and leaves others there.
    python_root = logging.getLogger()
    if _state.handler is not None and _state.handler in python_root.handlers:
        python_root.removeHandler(_state.handler)
    python_root.addHandler(handler)
    _state.handler = handler


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
        op_id = operation.current()
        if op_id is not None:
            fields = {OPERATION_KEY: op_id, **fields}
        # stacklevel 3: the caller of info/warning/error, not this module, is the line's file.
        self._logger.log(
            pylevel, msg, extra={"verbosity": v, "fields": fields}, exc_info=exc, stacklevel=3
        )

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
