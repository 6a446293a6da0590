"""`dracpu dev status`: what the `dev up` on a run folder is running, and whether it answers."""

from __future__ import annotations

import os
from typing import Any

from dracpu.dev.layout import RunLayout
from dracpu.dev.readiness import is_ready
from dracpu.dev.services import readiness
from dracpu.dev.up import run_status


def _alive(pid: object) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


async def collect(layout: RunLayout) -> dict[str, Any]:
    recorded = run_status(layout)
    document: dict[str, Any] = {"run_dir": str(layout.root), "running": recorded is not None}
    if recorded is None:
        return document
    if not recorded:
        document["starting"] = True
        return document
    api_url = str(recorded.get("api_url", ""))
    document.update(pid=recorded.get("pid"), api_url=api_url, services={})
    for name, entry in recorded.get("services", {}).items():
        document["services"][name] = {
            "pid": entry.get("pid"),
            "alive": _alive(entry.get("pid")),
            "ready": await is_ready(readiness(name, layout, api_url)),
            "restarts": entry.get("restarts", 0),
            "log": entry.get("log"),
        }
    return document


def render(document: dict[str, Any]) -> str:
    if not document["running"]:
        return f"no dracpu dev up is running on {document['run_dir']}"
    if document.get("starting"):
        return f"dracpu dev up is starting on {document['run_dir']}"
    lines = [
        f"dracpu dev up pid {document['pid']} on {document['run_dir']}; api {document['api_url']}"
    ]
    for name, entry in document["services"].items():
        state = "ready" if entry["ready"] else ("running" if entry["alive"] else "down")
        lines.append(
            f"  {name:<12} pid {entry['pid']!s:<8} {state:<8} restarts {entry['restarts']}"
        )
    return "\n".join(lines)
