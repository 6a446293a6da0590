"""Gatekeeping for the real-peer tiers: a tier's tests run as root with its tools present, and
otherwise skip with one line saying what is missing."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from harness.paths import CACHE


def cached_tool(tool: str, version: str, binary: str) -> Path:
    """Path of a binary built into the cache by a tools/ script; skips the test when absent."""
    path = CACHE / f"{tool}-{version}" / "bin" / binary
    if not (CACHE / f"{tool}-{version}" / ".complete").exists() or not path.exists():
        pytest.skip(f"{binary} {version} not built in {path.parent} (run make real-peers)")
    return path


def require_root(tier: str) -> None:
    """Skips the test unless running as root (the tier drives a real runtime or kernel)."""
    if os.geteuid() != 0:
        pytest.skip(f"{tier} tier needs root (cgroups, mounts, runtime sockets)")


def require_command(tier: str, command: str) -> str:
    """Path of a command on PATH; skips the test when it is not installed."""
    found = shutil.which(command)
    if found is None:
        pytest.skip(f"{tier} tier needs '{command}' on PATH (run make real-peers as root)")
    return found
