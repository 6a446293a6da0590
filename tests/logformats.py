"""Parsers of the two Kubernetes log formats, written from the formats' definitions rather
than from the driver's code, so tests read the logs as a log collector would.

klog text (k8s.io/klog/v2, structured `InfoS`/`ErrorS` lines):
    Lmmdd hh:mm:ss.uuuuuu threadid file:line] "msg" key1=value1 key2="value 2"
L is the severity (I, W, E, F); threadid is right-aligned in 7 columns; the message and
string values are Go-quoted (strconv.Quote); other values are bare (numbers, true/false).

component-base JSON (k8s.io/component-base/logs/json): one JSON object per line with `ts`
(a number: milliseconds since the epoch), `caller` ("file:line"), `msg`, `v` (the verbosity,
on info lines), then the key/value pairs as members.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

_HEADER = re.compile(
    r"^(?P<severity>[IWEF])(?P<month>\d\d)(?P<day>\d\d) "
    r"(?P<time>\d\d:\d\d:\d\d\.\d{6}) (?P<pid>[ \d]{7,}) "
    r"(?P<file>[^ :\]]+):(?P<line>\d+)\] "
)
# A Go-quoted string: the quote, then characters other than a quote or backslash, or escapes.
_GO_STRING = r'"(?:[^"\\]|\\.)*"'
_KEY_VALUE = re.compile(rf" (?P<key>[A-Za-z_][\w.\-/]*)=(?P<value>{_GO_STRING}|[^ \"]+)")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\"}


@dataclass
class KlogLine:
    severity: str
    month: int
    day: int
    time: str
    pid: int
    file: str
    line: int
    msg: str
    values: dict[str, Any] = field(default_factory=dict)


def go_unquote(text: str) -> str:
    assert text.startswith('"') and text.endswith('"'), text
    out: list[str] = []
    body = text[1:-1]
    index = 0
    while index < len(body):
        char = body[index]
        if char != "\\":
            out.append(char)
            index += 1
            continue
        escape = body[index + 1]
        if escape == "x":
            out.append(chr(int(body[index + 2 : index + 4], 16)))
            index += 4
            continue
        assert escape in _ESCAPES, f"unknown escape \\{escape} in {text}"
        out.append(_ESCAPES[escape])
        index += 2
    return "".join(out)


def _bare(value: str) -> Any:
    if value in ("true", "false"):
        return value == "true"
    try:
        return int(value)
    except ValueError:
        pass
    try:
        return float(value)
    except ValueError:
        return value


def parse_klog(line: str) -> KlogLine:
    """One klog text line; AssertionError naming what does not fit the format."""
    header = _HEADER.match(line)
    assert header is not None, f"not a klog header: {line!r}"
    rest = line[header.end() :]
    message = re.match(_GO_STRING, rest)
    assert message is not None, f"the message is not a quoted string: {line!r}"
    parsed = KlogLine(
        severity=header["severity"],
        month=int(header["month"]),
        day=int(header["day"]),
        time=header["time"],
        pid=int(header["pid"]),
        file=header["file"],
        line=int(header["line"]),
        msg=go_unquote(message.group(0)),
    )
    rest = rest[message.end() :]
    while rest:
        pair = _KEY_VALUE.match(rest)
        assert pair is not None, f"not a key=value pair at {rest!r} in {line!r}"
        value = pair["value"]
        parsed.values[pair["key"]] = go_unquote(value) if value.startswith('"') else _bare(value)
        rest = rest[pair.end() :]
    assert 1 <= parsed.month <= 12 and 1 <= parsed.day <= 31, line
    return parsed


def parse_json(line: str) -> dict[str, Any]:
    """One component-base JSON line; AssertionError naming what does not fit the format."""
    entry = json.loads(line)
    assert isinstance(entry, dict), line
    assert isinstance(entry.get("ts"), int | float), f"ts is not a number: {line}"
    assert isinstance(entry.get("caller"), str) and re.fullmatch(r"[^:]+:\d+", entry["caller"]), (
        f"caller is not file:line: {line}"
    )
    assert isinstance(entry.get("msg"), str), f"msg is not a string: {line}"
    if "v" in entry:
        assert isinstance(entry["v"], int) and entry["v"] >= 0, line
    return entry


def klog_lines(text: str) -> list[KlogLine]:
    return [parse_klog(line) for line in text.splitlines() if line.strip()]


def json_lines(text: str) -> list[dict[str, Any]]:
    return [parse_json(line) for line in text.splitlines() if line.strip()]
