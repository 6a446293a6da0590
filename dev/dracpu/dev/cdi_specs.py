"""Resolve CDI device ids against a CDI spec directory the way a runtime does before it creates
a container: find the spec that defines `<kind>=<name>` and collect its env edits."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from dracpu.core.errors import NotFoundError


def _load(path: Path) -> dict[str, Any] | None:
    try:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (OSError, ValueError, yaml.YAMLError):
        return None  # a runtime skips specs it cannot load
    return data if isinstance(data, dict) else None


def _env_edits(edits: object) -> list[str]:
    if not isinstance(edits, dict):
        return []
    return [str(item) for item in edits.get("env") or []]


def resolve_env(cdi_dir: Path, device_ids: list[str]) -> list[str]:
    """The `K=V` env entries the runtime would inject for these qualified CDI device ids."""
    # Runtimes read only *.json and *.yaml, so a spec being written (a temp file) is unseen.
    paths = sorted(p for p in cdi_dir.glob("*") if p.suffix in (".json", ".yaml"))
    specs = [spec for path in paths if (spec := _load(path)) is not None]
    env: list[str] = []
    for device_id in device_ids:
        kind, _, name = device_id.partition("=")
        for spec in specs:
            if spec.get("kind") != kind:
                continue
            device = next((d for d in spec.get("devices") or [] if d.get("name") == name), None)
            if device is not None:
                env += _env_edits(spec.get("containerEdits"))
                env += _env_edits(device.get("containerEdits"))
                break
        else:
            raise NotFoundError(f"unresolvable CDI device {device_id} in {cdi_dir}")
    return env
