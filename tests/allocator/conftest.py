"""Machines for the allocator tests: the topology fixtures, discovered from their sysfs trees
exactly as the topology service would see them."""

from __future__ import annotations

import functools
import json
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from harness import paths

from dracpu.core.machine import Machine
from dracpu.topology.discovery import discover
from dracpu.topology.fixtures import write_fixture


@functools.cache
def fixture_machine(name: str) -> Machine:
    root = Path(tempfile.mkdtemp(dir="/tmp", prefix="fx-"))
    try:
        return discover(write_fixture(name, root))
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def machines() -> Callable[[str], Machine]:
    return fixture_machine


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A short temp dir: unix socket paths must fit in 107 bytes."""
    with paths.short_tmp("al-") as path:
        yield path


def write_topology_file(machine: Machine, path: Path) -> Path:
    path.write_text(json.dumps({"cpus": machine.to_report_cpus()}))
    return path
