"""Each long-running loop of the dra-plugin survives an unexpected error: logged with its
traceback, restarted, counted, and reported while it restarts (its view's health NOT_SERVING,
the loop named in the api's /readyz). The plugin runs against the loopback API server with a
pod to write Events on, so every loop it declares runs."""

from __future__ import annotations

import pytest
from harness.dra_plugin_node import NODE_UID
from harness.log_lines import captured
from harness.loop_faults import NODE, LoopFault, no_shutdown_errors, services, survives

from dracpu.dev.apiserver import fake_apiserver
from dracpu.dra_plugin.runtime import LOOPS

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("loop", LOOPS)
async def test_a_failed_loop_is_logged_restarted_and_reported(
    loop: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    fault = LoopFault("dra-plugin", loop)
    fault.install(monkeypatch)
    with captured() as lines:
        async with services(monkeypatch) as running:
            with fake_apiserver(running.root) as (store, kubeconfig):
                store.nodes[NODE] = {"apiVersion": "v1", "kind": "Node",
                                     "metadata": {"name": NODE, "uid": NODE_UID}}  # fmt: skip
                await running.topology()
                await running.allocator()
                await running.dra_plugin(kubeconfig)
                assert fault.started["dra-plugin"] == list(LOOPS)
                await survives(running, fault, lines)
                await running.stop_all()
        no_shutdown_errors(lines)
