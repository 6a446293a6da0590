"""A real runtime node with `dracpu dev up --no-runtime-sim` attached: the real-node test bed.

The runtime is containerd unless DRACPU_RUNTIME=crio selects CRI-O (harness/crio_node.py).
Reusable from other tiers and the benchmarks (`from harness.realnode_stack import
start_stack`); the tests share one bed, the session fixture `realnode_stack`.
DRACPU_REALNODE_PORTS=LOW-HIGH restricts the API port range (default: any free port);
DRACPU_REALNODE_KEEP=1 keeps the directories of passing tests; DRACPU_REALNODE_PREFIX names
the /tmp directories (default dracpu-rn-), so several runs on one machine can tell theirs apart.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.containerd_node import CONTAINERD_VERSIONS, ContainerdNode, missing_tools
from harness.crio_node import CRIO_VERSIONS, CrioNode, missing_crio_tools
from harness.dev_up import DevUp, free_port

RUNTIMES = ("containerd", "crio")


def runtime() -> str:
    """The runtime of the real-node bed: DRACPU_RUNTIME, containerd when unset."""
    name = os.environ.get("DRACPU_RUNTIME", "").strip().lower() or "containerd"
    if name not in RUNTIMES:
        raise ValueError(f"DRACPU_RUNTIME must be one of {', '.join(RUNTIMES)}, not {name!r}")
    return name


def runtime_versions() -> tuple[str, ...]:
    """The versions of the selected runtime the tier knows, newest first."""
    return CRIO_VERSIONS if runtime() == "crio" else CONTAINERD_VERSIONS


def make_node(
    base: Path,
    run_dir: Path,
    version: str = "",
    *,
    name: str = "",
    nri_timeout: str = "",
) -> ContainerdNode:
    """A node of runtime `name` (default: the selected one) on `base`, its NRI socket and CDI
    specs in `run_dir`; `nri_timeout` raises the NRI plugin registration and request timeouts
    from the runtime's defaults (a slow machine, such as an emulated guest)."""
    timeouts = (
        {"plugin_request_timeout": nri_timeout, "plugin_registration_timeout": nri_timeout}
        if nri_timeout
        else {}
    )
    if (name or runtime()) == "crio":
        return CrioNode(base, run_dir, version=version or CRIO_VERSIONS[0], **timeouts)
    return ContainerdNode(base, run_dir, version=version or CONTAINERD_VERSIONS[0], **timeouts)


def api_port() -> int:
    low, _, high = os.environ.get("DRACPU_REALNODE_PORTS", "").partition("-")
    return free_port(int(low), int(high)) if low and high else free_port()


def require_realnode(version: str = "") -> None:
    if os.geteuid() != 0:
        pytest.skip("realnode tier needs root (runc, cgroups, overlay mounts)")
    if runtime() == "crio":
        reason = missing_crio_tools(version or CRIO_VERSIONS[0])
    else:
        reason = missing_tools(version or CONTAINERD_VERSIONS[0])
    if reason:
        pytest.skip(f"realnode tier: {reason}")


@dataclass
class Stack:
    """A runtime node and the dracpu services attached to it."""

    node: ContainerdNode
    dev: DevUp
    base: Path

    def teardown(self) -> None:
        try:
            self.node.teardown()
        finally:
            self.dev.stop()


def start_stack(version: str = "", *, verbosity: int = 2, dev_extra: tuple[str, ...] = ()) -> Stack:
    """The runtime first (its NRI socket is then there when the plugin dials), then dev up;
    `version` defaults to the selected runtime's newest."""
    require_realnode(version)
    base = Path(
        tempfile.mkdtemp(prefix=os.environ.get("DRACPU_REALNODE_PREFIX", "dracpu-rn-"), dir="/tmp")
    )
    node = make_node(base / "node", base / "rd", version)
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


@pytest.fixture(scope="session")
def realnode_stack(request: pytest.FixtureRequest) -> Iterator[Stack]:
    """One node of the selected runtime (newest version) with the services attached, shared by
    every test of the session that runs on a real node (tests/realnode's as `stack`,
    tests/security's): a run of both folders starts one node, not two. Each test leaves it as
    it found it: its pods removed, its claims released, the shared pool whole again. A run with
    a failure keeps the directories (the runtime's and the services' logs) for a look."""
    started = start_stack()
    yield started
    finish_stack(started, request.session.testsfailed > 0)
