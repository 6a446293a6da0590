"""Fixtures of the security tests: the nri-plugin test bed (real allocator process, runtime
stand-in on a temporary NRI socket, the plugin in-process) and a kubelet-like client that
prepares claims with their reservedFor pods. See tests/harness/nri_bed.py."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from harness import nri_bed
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
