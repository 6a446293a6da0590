"""The allocator's long-running loop survives an unexpected error: logged with its traceback,
restarted, counted, and reported while it restarts (NOT_SERVING, the loop named in the api's
/readyz)."""

from __future__ import annotations

import pytest
from harness.log_lines import captured
from harness.loop_faults import LoopFault, no_shutdown_errors, services, survives

from dracpu.allocator.runtime import LOOPS


@pytest.mark.parametrize("loop", LOOPS)
async def test_a_failed_loop_is_logged_restarted_and_reported(
    loop: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    fault = LoopFault("allocator", loop)
    fault.install(monkeypatch)
    with captured() as lines:
        async with services(monkeypatch) as running:
            await running.topology()
            await running.allocator()
            assert fault.started["allocator"] == list(LOOPS)
            await survives(running, fault, lines)
        no_shutdown_errors(lines)
