"""The runtime-timeout window: a plugin stopped longer than containerd's plugin request timeout
(2 s) is dropped, containers created meanwhile start unpinned; once the plugin runs again it
reconnects, Synchronize re-pins them, and it says so (log line naming them, metrics)."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import pytest
from harness.realnode_stack import Stack
from harness.waits import wait_for

pytestmark = pytest.mark.realnode

ONLINE = Path("/sys/devices/system/cpu/online").read_text().strip()


def metric(text: str, name: str) -> float:
    match = re.search(rf"^{name}(?:{{[^}}]*}})? ([0-9.e+-]+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


def test_a_stopped_plugin_is_dropped_and_reconnecting_re_pins_what_started_meanwhile(
    stack: Stack,
) -> None:
    node, dev = stack.node, stack.dev
    pod = node.run_pod("window")
    claim = dev.claim(
        "window", pod_uid=node.pod_uid(pod)
    )  # the pool is now smaller than the machine
    pool = dev.shared_pool()
    assert pool != ONLINE
    pid = dev.service_pid("nri-plugin")
    os.kill(pid, signal.SIGSTOP)
    try:
        # containerd waits its request timeout for the plugin, drops it, creates anyway.
        unpinned = node.run_container(pod, "while-stopped")
        assert node.allowed_cpus(unpinned.id) == ONLINE
    finally:
        os.kill(pid, signal.SIGCONT)

    wait_for(
        lambda: node.allowed_cpus(unpinned.id) == pool, "the re-pinning", timeout=60, interval=0.5
    )
    assert node.cgroup_cpus(unpinned.id) == pool
    log = dev.service_log("nri-plugin")
    assert "runtime connection lost" in log
    repinned = [line for line in log.splitlines() if "re-pinned containers" in line]
    assert repinned and "default/window/while-stopped" in repinned[-1]
    metrics = dev.metrics()
    assert metric(metrics, "dra_cpu_nri_runtime_disconnects_total") >= 1
    assert metric(metrics, "dra_cpu_nri_repinned_containers_total") >= 1
    # Measured from when the plugin noticed (a stopped plugin notices when it runs again).
    assert metric(metrics, "dra_cpu_nri_unpinned_window_seconds") > 0

    node.remove_pod(pod)
    dev.release(claim.name)


def test_a_claimed_container_created_while_the_plugin_is_stopped_is_pinned_late_and_counted(
    stack: Stack,
) -> None:
    node, dev = stack.node, stack.dev
    pod = node.run_pod("late")
    claim = dev.claim("late", pod_uid=node.pod_uid(pod))
    before = metric(dev.metrics(), "dra_cpu_nri_late_pins_total")
    pid = dev.service_pid("nri-plugin")
    os.kill(pid, signal.SIGSTOP)
    try:
        # containerd's plugin_request_timeout expires: the claimed container starts with the
        # claim's env (CDI) but on every CPU its cgroup parent allows.
        claimed = node.run_container(pod, "claimed-late", cdi_devices=claim.cdi_devices)
        assert f"{claim.env_key}={claim.cpuset}" in node.exec(claimed.id, "env").splitlines()
        assert node.allowed_cpus(claimed.id) == ONLINE
    finally:
        os.kill(pid, signal.SIGCONT)

    wait_for(
        lambda: node.allowed_cpus(claimed.id) == claim.cpuset,
        "the late pin",
        timeout=60,
        interval=0.5,
    )
    assert node.cgroup_cpus(claimed.id) == claim.cpuset
    late = [
        line
        for line in dev.service_log("nri-plugin").splitlines()
        if "claimed container pinned late" in line
    ]
    assert late and "default/late/claimed-late" in late[-1] and claim.uid in late[-1]
    assert metric(dev.metrics(), "dra_cpu_nri_late_pins_total") == before + 1

    node.remove_pod(pod)
    dev.release(claim.name)
