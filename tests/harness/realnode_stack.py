"""A containerd node with `dracpu dev up --no-runtime-sim` attached: the real-node test bed.

Reusable from other tiers and the benchmarks (`from harness.realnode_stack import
start_stack`). DRACPU_REALNODE_PORTS=LOW-HIGH
restricts the API port range (default: any free port); DRACPU_REALNODE_KEEP=1 keeps the
directories of passing tests; DRACPU_REALNODE_PREFIX names the /tmp directories (default
dracpu-rn-), so several runs on one machine can tell theirs apart.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.containerd_node import CONTAINERD_VERSIONS, ContainerdNode, missing_tools
from harness.dev_up import DevUp, free_port


def api_port() -> int:
    low, _, high = os.environ.get("DRACPU_REALNODE_PORTS", "").partition("-")
    return free_port(int(low), int(high)) if low and high else free_port()


def require_realnode(version: str = CONTAINERD_VERSIONS[0]) -> None:
    if os.geteuid() != 0:
        pytest.skip("realnode tier needs root (runc, cgroups, overlay mounts)")
    reason = missing_tools(version)
    if reason:
        pytest.skip(f"realnode tier: {reason}")


@dataclass
class Stack:
    """A containerd node and the dracpu services attached to it."""

    node: ContainerdNode
    dev: DevUp
    base: Path

    def teardown(self) -> None:
        try:
            self.node.teardown()
        finally:
            self.dev.stop()


def start_stack(
    version: str = CONTAINERD_VERSIONS[0], *, verbosity: int = 2, dev_extra: tuple[str, ...] = ()
) -> Stack:
    """containerd first (its NRI socket is then there when the plugin dials), then dev up."""
    require_realnode(version)
    base = Path(
        tempfile.mkdtemp(prefix=os.environ.get("DRACPU_REALNODE_PREFIX", "dracpu-rn-"), dir="/tmp")
    )
    node = ContainerdNode(base / "node", base / "rd", version=version)
    dev = DevUp(base / "rd", api_port(), verbosity=verbosity, extra=dev_extra)
    stack = Stack(node, dev, base)
    try:
        node.start()
        dev.start()
        dev.wait_ready()
    except BaseException:
        stack.teardown()
        raise
    return stack


def finish_stack(stack: Stack, failed: bool = False) -> None:
    """Tear down; keep the directories (logs) of a failed run for a look."""
    stack.teardown()
    if not failed and not os.environ.get("DRACPU_REALNODE_KEEP"):
        shutil.rmtree(stack.base, ignore_errors=True)
