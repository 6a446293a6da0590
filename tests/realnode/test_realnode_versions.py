"""The runtime-version matrix for unsolicited UpdateContainers under `auto`: containerd 2.4.2
(NRI v0.12.3, has the deadlock fix) gets pool growth pushed at once; 2.3.7 (NRI v0.12.0) does
not, and its shared containers grow at the next container creation instead. Under
DRACPU_RUNTIME=crio the matrix is CRI-O's: 1.34.0 vendors an NRI before v0.12 (it reports no
NRI version) and is not known to carry the fix, so it is off."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from harness.realnode_stack import Stack, finish_stack, runtime, runtime_versions, start_stack
from harness.waits import wait_for

pytestmark = pytest.mark.realnode

ONLINE = Path("/sys/devices/system/cpu/online").read_text().strip()


# Per runtime: (version, pushes at once, the nri-plugin's decision, what the runtime logs when
# the plugin registers).
MATRIX = {
    "containerd": [
        ("v2.4.2", True, "runtime reports NRI v0.12.3", "with NRI version v0.12"),
        ("v2.3.7", False, "runtime reports NRI v0.12.0", "with NRI version v0.12"),
    ],
    "crio": [
        (
            "v1.34.0",
            False,
            "runtime 'cri-o' not known to be safe",
            'registered as \\"00-dra.cpu\\"',
        ),
    ],
}
CASES = MATRIX[runtime()]


@pytest.fixture(params=CASES, ids=[f"{case[0][1:]}-{'on' if case[1] else 'off'}" for case in CASES])
def versioned(request: pytest.FixtureRequest) -> Iterator[tuple[Stack, bool, str, str]]:
    version, pushes, decision, registered = request.param
    if version == runtime_versions()[0]:
        yield request.getfixturevalue("stack"), pushes, decision, registered  # the shared node
        return
    stack = start_stack(version)
    yield stack, pushes, decision, registered
    finish_stack(stack, getattr(request.node, "rep_call_failed", False))


def test_pool_growth_reaches_running_containers_as_the_runtime_allows(
    versioned: tuple[Stack, bool, str, str],
) -> None:
    stack, pushes, decision, registered = versioned
    node, dev = stack.node, stack.dev
    runtime = dev.get("/v1/health")["runtime"]
    assert runtime["connected"]
    assert runtime["unsolicited_updates"] is pushes
    assert node.version.lstrip("v") in node.runtime_version()
    assert decision in dev.service_log("nri-plugin")
    # The runtime logs the plugin's registration (containerd with the NRI version it sent,
    # CRI-O its index and name).
    assert registered in node.log_text()

    pod = node.run_pod("matrix")
    claim = dev.claim("matrix", pod_uid=node.pod_uid(pod))
    claimed = node.run_container(pod, "claimed", cdi_devices=claim.cdi_devices)
    shared = node.run_container(pod, "shared")
    small = dev.shared_pool()
    assert node.allowed_cpus(shared.id) == small

    node.remove_container(claimed.id)
    dev.release(claim.name)
    wait_for(lambda: dev.shared_pool() == ONLINE, "the pool to grow back", timeout=30, interval=0.5)
    dev.wait_plugin_sees_pool()
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
