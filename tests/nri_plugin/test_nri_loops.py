"""Each long-running loop of the nri-plugin survives an unexpected error: logged with its
traceback, restarted, counted, and reported while it restarts (NOT_SERVING, the loop named in
the api's /readyz). The plugin runs connected to the runtime stand-in and the allocator."""

from __future__ import annotations

import pytest
from harness.log_lines import captured
from harness.loop_faults import LoopFault, no_shutdown_errors, services, survives

from dracpu.dev.runtime_sim import RuntimeProfile, RuntimeSim
from dracpu.nri_plugin.runtime import LOOPS

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("loop", LOOPS)
async def test_a_failed_loop_is_logged_restarted_and_reported(
    loop: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    fault = LoopFault("nri-plugin", loop)
    fault.install(monkeypatch)
    with captured() as lines:
        async with services(monkeypatch) as running:
            runtime = RuntimeSim(str(running.sock("nri")), RuntimeProfile())
            await runtime.start()
            try:
                await running.topology()
                await running.allocator()
                await running.nri_plugin()
                await runtime.wait_plugin()
                assert fault.started["nri-plugin"] == list(LOOPS)
                await survives(running, fault, lines)
                await running.stop_all()
            finally:
                await runtime.stop()
        no_shutdown_errors(lines)
