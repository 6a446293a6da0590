"""The runtime-version matrix for unsolicited UpdateContainers under `auto`: containerd 2.4.2
(NRI v0.12.3, has the deadlock fix) gets pool growth pushed at once; 2.3.7 (NRI v0.12.0) does
not, and its shared containers grow at the next container creation instead."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from harness.containerd_node import CONTAINERD_VERSIONS
from harness.realnode_stack import Stack, finish_stack, start_stack
from harness.waits import wait_for

pytestmark = pytest.mark.realnode

ONLINE = Path("/sys/devices/system/cpu/online").read_text().strip()


@pytest.fixture(params=[("v2.4.2", True), ("v2.3.7", False)], ids=["2.4.2-on", "2.3.7-off"])
def versioned(request: pytest.FixtureRequest) -> Iterator[tuple[Stack, bool]]:
    version, pushes = request.param
    if version == CONTAINERD_VERSIONS[0]:
        yield request.getfixturevalue("stack"), pushes  # the tier's shared node
        return
    stack = start_stack(version)
    yield stack, pushes
    finish_stack(stack, getattr(request.node, "rep_call_failed", False))


def test_pool_growth_reaches_running_containers_as_the_runtime_allows(
    versioned: tuple[Stack, bool],
) -> None:
    stack, pushes = versioned
    node, dev = stack.node, stack.dev
    runtime = dev.get("/v1/health")["runtime"]
    assert runtime["connected"]
    assert runtime["unsolicited_updates"] is pushes
    assert node.version in node.runtime_version()
    nri = "v0.12.3" if pushes else "v0.12.0"
    assert f"runtime reports NRI {nri}" in dev.service_log("nri-plugin")
    # containerd logs the version the plugin registered with.
    assert "with NRI version v0.12" in node.log_text()

    pod = node.run_pod("matrix")
    claim = dev.claim("matrix", pod_uid=node.pod_uid(pod))
    claimed = node.run_container(pod, "claimed", cdi_devices=claim.cdi_devices)
    shared = node.run_container(pod, "shared")
    small = dev.shared_pool()
    assert node.allowed_cpus(shared.id) == small

    node.remove_container(claimed.id)
    dev.release(claim.name)
    wait_for(lambda: dev.shared_pool() == ONLINE, "the pool to grow back", timeout=30, interval=0.5)
    generation = dev.get("/v1/shared-pool")["generation"]
    wait_for(
        lambda: dev.get("/v1/health")["runtime"]["shared_pool_generation"] >= generation,
        "the plugin to see the grown pool",
        timeout=30,
        interval=0.5,
    )
    if pushes:
        wait_for(
            lambda: node.allowed_cpus(shared.id) == ONLINE,
            "the pushed growth",
            timeout=30,
            interval=0.5,
        )
    else:
        assert node.allowed_cpus(shared.id) == small
        node.run_container(pod, "next")  # the next solicited chance carries the growth
        assert node.allowed_cpus(shared.id) == ONLINE
    assert node.cgroup_cpus(shared.id) == ONLINE
    node.remove_pod(pod)
