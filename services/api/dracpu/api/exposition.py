"""Merging several Prometheus text expositions (format 0.0.4) into one.

Each metric family keeps one HELP and one TYPE line. A family that more than one service
exports gets a `service` label on its samples so the series stay distinct, and so does every
family of the standard process collectors (process_*, python_*), even when only one service
answered: each process's figures are always told apart by their service. Any other family only
one service exports passes through untouched.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from dracpu.core.metrics import PROCESS_FAMILY_PREFIXES

_DECLARATION = re.compile(r"^#\s+(HELP|TYPE)\s+([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\s(.*))?$")
# Label values are quoted and may hold braces and escaped quotes.
_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[^"}]|"(?:[^"\\]|\\.)*")*\})?(\s.*)$')
# Suffixes a family's samples may carry beyond its declared name.
_SUFFIXES = ("_bucket", "_sum", "_count", "_total", "_created", "_info", "_gcount", "_gsum")


@dataclass
class _Family:
    name: str
    help: str | None = None
    type: str | None = None
    samples: list[tuple[str, str]] = field(default_factory=list)  # (service, line)
    services: list[str] = field(default_factory=list)


def _belongs(sample: str, family: str) -> bool:
    return sample == family or any(sample == family + suffix for suffix in _SUFFIXES)


def _with_service(line: str, service: str) -> str:
    match = _SAMPLE.match(line)
    if match is None:
        return line
    name, labels, rest = match.groups()
    if labels and re.search(r"(^\{|,)\s*service\s*=", labels):
        return line
    inner = labels[1:-1].strip().rstrip(",") if labels else ""
    joined = f'service="{service}"' + (f",{inner}" if inner else "")
    return f"{name}{{{joined}}}{rest}"


def merge(sources: Iterable[tuple[str, str]]) -> str:
    """Concatenate (service, exposition text) pairs with one HELP/TYPE per family."""
    families: dict[str, _Family] = {}

    def family(name: str, service: str) -> _Family:
        entry = families.setdefault(name, _Family(name))
        if service not in entry.services:
            entry.services.append(service)
        return entry

    for service, text in sources:
        current: _Family | None = None
        for raw in text.splitlines():
            line = raw.strip()
            if not line:
                continue
            declaration = _DECLARATION.match(line)
            if declaration:
                kind, name, _ = declaration.groups()
                current = family(name, service)
                if kind == "HELP" and current.help is None:
                    current.help = line
                elif kind == "TYPE" and current.type is None:
                    current.type = line
                continue
            if line.startswith("#"):
                continue  # other comments, an OpenMetrics "# EOF"
            match = _SAMPLE.match(line)
            if match is None:
                continue  # not a sample line; dropping it keeps the output parseable
            sample_name = match.group(1)
            if current is None or not _belongs(sample_name, current.name):
                current = family(sample_name, service)
            current.samples.append((service, line))

    out: list[str] = []
    for entry in families.values():
        shared = len(entry.services) > 1 or entry.name.startswith(PROCESS_FAMILY_PREFIXES)
        if entry.help:
            out.append(entry.help)
        if entry.type:
            out.append(entry.type)
        for service, line in entry.samples:
            out.append(_with_service(line, service) if shared else line)
    return "\n".join(out) + "\n" if out else ""
