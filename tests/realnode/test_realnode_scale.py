"""Shared-pool pushes at scale on a real runtime: with well over a hundred running shared
containers (runc applies one update in tens of milliseconds, so one push takes seconds), pool
changes back and forth, faster than a push completes, end with every container on the current
pool, by the kernel's account, and the view saying the same. On a runtime the plugin does not
push to, the same holds once the runtime's next call has carried each change."""

from __future__ import annotations

from pathlib import Path

import pytest
from harness.containerd_node import cpus_allowed
from harness.realnode_stack import Stack
from harness.waits import wait_for

pytestmark = pytest.mark.realnode

ONLINE = Path("/sys/devices/system/cpu/online").read_text().strip()
SHARED = 120


def wrong(pids: dict[str, int], pool: str) -> list[str]:
    return [cid for cid, pid in pids.items() if cpus_allowed(pid) != pool]


def nudge(stack: Stack, pod: str, name: str) -> None:
    """On a runtime the plugin does not push to (CRI-O), a pool change reaches running
    containers with the runtime's next call: one more container's CreateContainer answer
    carries an update for every shared container not on the current pool."""
    stack.dev.wait_plugin_sees_pool()
    stack.node.run_container(pod, f"nudge-{name}")


def test_every_shared_container_ends_on_the_current_pool(stack: Stack) -> None:
    node, dev = stack.node, stack.dev
    pods = [node.run_pod(f"scale-{n}") for n in range(3)]
    containers = []
    for index, pod in enumerate(pods):
        names = [f"s{index}-{n}" for n in range(SHARED // len(pods))]
        containers += node.run_containers(pod, names)
    pids = node.pids([c.id for c in containers])
    assert len(pids) >= SHARED

    # Shrink, grow, shrink again without waiting: a change can land while the push of the
    # previous one is still going through runc.
    first = dev.claim("scale-a")
    dev.release(first.name)
    second = dev.claim("scale-b")
    small = dev.shared_pool()
    assert small != ONLINE
    pushes = dev.pushes_pool_changes()
    if not pushes:
        nudge(stack, pods[0], "shrink")
    wait_for(
        lambda: not wrong(pids, small), f"all {len(pids)} on {small}", timeout=120, interval=0.5
    )

    dev.release(second.name)
    third = dev.claim("scale-c")
    dev.release(third.name)
    wait_for(lambda: dev.shared_pool() == ONLINE, "the pool to grow back", timeout=30, interval=0.5)
    if not pushes:
        nudge(stack, pods[0], "grow")
    wait_for(
        lambda: not wrong(pids, ONLINE), f"all {len(pids)} on {ONLINE}", timeout=120, interval=0.5
    )

    for cid, pid in pids.items():
        assert node.cgroup_cpus(cid) == ONLINE, cid
        assert cpus_allowed(pid) == ONLINE, cid
    view = {c["container_id"]: c["cpus"] for c in dev.containers()}
    wait_for(
        lambda: all(c["cpus"] == ONLINE for c in dev.containers() if c["container_id"] in pids),
        "the view to say what the runtime has",
        timeout=30,
        interval=0.5,
    )
    assert set(pids) <= set(view)
    for pod in pods:
        node.remove_pod(pod)
