"""Fixtures of the nri-plugin tests: the real allocator process, the runtime stand-in on a
temporary NRI socket, and the plugin (in-process) connected to both (tests/harness/nri_bed.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from harness import nri_bed
from harness.log_lines import LogLines, captured
from harness.nri_bed import (
    Allocator,
    Bed,
    new_plugin,
    stop_tasks,
)

from dracpu.dev.runtime_sim import RuntimeProfile, RuntimeSim
from dracpu.nri_plugin.transport.compat import UnsolicitedMode

# The bed's fixtures, shared with the other conftest that drives it.
short_tmp = nri_bed.short_tmp
allocator = nri_bed.allocator


@pytest.fixture
def profile() -> RuntimeProfile:
    return RuntimeProfile()


@pytest.fixture
def unsolicited_mode() -> UnsolicitedMode:
    return UnsolicitedMode.AUTO


@pytest.fixture
async def bed(
    allocator: Allocator,
    short_tmp: Path,
    profile: RuntimeProfile,
    unsolicited_mode: UnsolicitedMode,
) -> AsyncIterator[Bed]:
    nri_socket = short_tmp / "nri.sock"
    runtime = RuntimeSim(str(nri_socket), profile)
    await runtime.start()
    plugin, stub, client, tasks = new_plugin(allocator, nri_socket, unsolicited_mode)
    try:
        await runtime.wait_plugin()
        yield Bed(runtime, plugin, stub, allocator, client, tasks)
    finally:
        await stop_tasks(stub, tasks)
        await runtime.stop()
        await client.close()


@pytest.fixture
def lines() -> Iterator[LogLines]:
    """The driver's log lines written during the test."""
    with captured() as handler:
        yield handler
