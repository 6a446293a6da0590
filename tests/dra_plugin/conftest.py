"""Fixtures of the dra-plugin tests: the node of harness.dra_plugin_node, fresh or started,
and the 1024-CPU sysfs fixture written once per session."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from harness.dra_plugin_node import Node

from dracpu.topology.fixtures import write_fixture


@pytest.fixture(scope="session")
def big_sysfs() -> Iterator[Path]:
    """The 1024-CPU fixture, written once: it is large, and the services only read it."""
    root = Path(tempfile.mkdtemp(prefix="dpbig", dir="/tmp"))
    try:
        yield write_fixture("big-1024", root / "sys")
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def node() -> Iterator[Node]:
    n = Node()
    try:
        yield n
    finally:
        n.close()


@pytest.fixture
async def started(node: Node) -> AsyncIterator[Node]:
    await node.start()
    yield node


os.environ.setdefault("PYTHONUNBUFFERED", "1")
