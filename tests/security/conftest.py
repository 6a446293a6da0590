"""Fixtures of the security tests: the nri-plugin test bed (real allocator process, runtime
stand-in on a temporary NRI socket, the plugin in-process) and a kubelet-like client that
prepares claims with their reservedFor pods. See tests/nri_plugin/nri_bed.py."""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

sys.path.append(str(Path(__file__).resolve().parents[1] / "nri_plugin"))

from nri_bed import (
    Allocator,
    Bed,
    allocator_command,
    new_plugin,
    start_process,
    stop_process,
    stop_tasks,
    wait_serving,
    write_topology_report,
)

from dracpu.dev.runtime_sim import RuntimeProfile, RuntimeSim
from dracpu.nri_plugin.compat import UnsolicitedMode


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """Unix socket paths must fit in 107 bytes: keep the directory short."""
    path = Path(tempfile.mkdtemp(dir="/tmp", prefix="sec-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
async def allocator(short_tmp: Path) -> AsyncIterator[Allocator]:
    report = write_topology_report(short_tmp)
    socket = short_tmp / "alloc.sock"
    log = short_tmp / "allocator.log"
    process = start_process(allocator_command(short_tmp, socket, report), log)
    try:
        await wait_serving(socket, process, log)
        yield Allocator(socket, short_tmp, process)
    finally:
        stop_process(process)


@pytest.fixture
async def bed(allocator: Allocator, short_tmp: Path) -> AsyncIterator[Bed]:
    nri_socket = short_tmp / "nri.sock"
    runtime = RuntimeSim(str(nri_socket), RuntimeProfile())
    await runtime.start()
    plugin, stub, client, tasks = new_plugin(allocator, nri_socket, UnsolicitedMode.AUTO)
    try:
        await runtime.wait_plugin()
        yield Bed(runtime, plugin, stub, allocator, client, tasks)
    finally:
        await stop_tasks(stub, tasks)
        await runtime.stop()
        await client.close()
