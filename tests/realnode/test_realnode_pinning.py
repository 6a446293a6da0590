"""Claimed and shared containers on a real containerd + runc: what the kernel says they run on."""

from __future__ import annotations

from pathlib import Path

import pytest
from realnode.devup import wait_until
from realnode.stack import Stack

pytestmark = pytest.mark.realnode

ONLINE = Path("/sys/devices/system/cpu/online").read_text().strip()


def test_claimed_and_shared_containers_are_pinned_and_release_grows_the_pool(
    stack: Stack,
) -> None:
    node, dev = stack.node, stack.dev
    pod = node.run_pod("pinning")
    claim = dev.claim("pin1")
    claimed = node.run_container(pod, "claimed", cdi_devices=claim.cdi_devices)
    shared = node.run_container(pod, "shared")
    pool = dev.shared_pool()
    assert pool and pool != claim.cpuset

    # CDI put the claim's env into the container; runc put the cpuset into the kernel.
    assert f"{claim.env_key}={claim.cpuset}" in node.exec(claimed.id, "env").splitlines()
    assert node.cgroup_cpus(claimed.id) == claim.cpuset
    assert node.allowed_cpus(claimed.id) == claim.cpuset
    assert node.cgroup_cpus(shared.id) == pool
    assert node.allowed_cpus(shared.id) == pool

    # The view tells what the runtime runs, in the state the runtime reports.
    view = {c["container_id"]: c for c in dev.containers()}
    assert view[claimed.id]["cpus"] == claim.cpuset and view[claimed.id]["exclusive"]
    assert view[shared.id]["cpus"] == pool
    assert view[shared.id]["state"] == "running"

    # Release: the claim's container goes, the claim is unprepared, the pool grows back and
    # the shared container follows it without being recreated.
    node.remove_container(claimed.id)
    dev.release("pin1")
    wait_until(lambda: dev.shared_pool() == ONLINE, 30, "the pool to grow back")
    wait_until(lambda: node.allowed_cpus(shared.id) == ONLINE, 30, "the shared container to grow")
    assert node.cgroup_cpus(shared.id) == ONLINE
    node.remove_pod(pod)
