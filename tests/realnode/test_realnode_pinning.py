"""Claimed and shared containers on a real runtime (containerd or CRI-O) + runc: what the kernel
says they run on."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from harness.containerd_node import Container, NodeError
from harness.dev_up import Claim, DevUp
from harness.realnode_stack import Stack
from harness.waits import wait_for

pytestmark = pytest.mark.realnode

ONLINE = Path("/sys/devices/system/cpu/online").read_text().strip()


def claimed_and_shared(
    stack: Stack, pod_name: str, claim_name: str
) -> tuple[str, Claim, Container, Container, str]:
    """A pod with a claimed container and a shared one: the pod, the claim, both containers and
    the shared pool once the claim took its CPUs."""
    node, dev = stack.node, stack.dev
    pod = node.run_pod(pod_name)
    claim = dev.claim(claim_name, pod_uid=node.pod_uid(pod))
    claimed = node.run_container(pod, "claimed", cdi_devices=claim.cdi_devices)
    shared = node.run_container(pod, "shared")
    pool = dev.shared_pool()
    assert pool and pool != claim.cpuset
    return pod, claim, claimed, shared, pool


def test_claimed_and_shared_containers_are_pinned_and_release_grows_the_pool(
    stack: Stack,
) -> None:
    node, dev = stack.node, stack.dev
    pod, claim, claimed, shared, pool = claimed_and_shared(stack, "pinning", "pin1")

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
    wait_for(lambda: dev.shared_pool() == ONLINE, "the pool to grow back", timeout=30, interval=0.5)
    if not dev.pushes_pool_changes():
        # A runtime the plugin does not push to (CRI-O): the running container keeps the
        # smaller pool until the runtime's next call, here a new container's CreateContainer.
        dev.wait_plugin_sees_pool()
        assert node.allowed_cpus(shared.id) == pool
        node.run_container(pod, "next")
    wait_for(
        lambda: node.allowed_cpus(shared.id) == ONLINE,
        "the shared container to grow",
        timeout=30,
        interval=0.5,
    )
    assert node.cgroup_cpus(shared.id) == ONLINE
    node.remove_pod(pod)


def test_an_update_through_the_runtime_leaves_each_container_on_its_own_cpuset(
    stack: Stack,
) -> None:
    """What the kubelet's static CPU Manager does to every container (a CRI
    UpdateContainerResources with its default set), done with crictl: the runtime hands it to
    the plugin, whose answer keeps the cpuset; the rest of the update goes through."""
    node, dev = stack.node, stack.dev
    pod, claim, claimed, shared, pool = claimed_and_shared(stack, "updates", "upd1")
    assert node.allowed_cpus(claimed.id) == claim.cpuset and node.allowed_cpus(shared.id) == pool

    node.crictl("update", "--cpuset-cpus", ONLINE, "--cpu-period", "100000",
                "--cpu-quota", "50000", claimed.id)  # fmt: skip
    node.crictl("update", "--cpuset-cpus", claim.cpuset, shared.id)
    for container, cpus in ((claimed, claim.cpuset), (shared, pool)):
        assert node.cgroup_cpus(container.id) == cpus, container.name
        assert node.allowed_cpus(container.id) == cpus, container.name
    assert node.cpu_quota(claimed.id) == 50000
    assert "kept container on its cpuset against an update" in dev.service_log("nri-plugin")

    # One naming the container's own cpuset, or none, goes through as asked.
    node.crictl("update", "--cpuset-cpus", claim.cpuset, "--cpu-quota", "80000", claimed.id)
    assert node.cpu_quota(claimed.id) == 80000 and node.allowed_cpus(claimed.id) == claim.cpuset
    node.remove_pod(pod)
    dev.release("upd1")


@pytest.mark.parametrize(
    ("name", "env", "reason"),
    [
        ("garbage", {"DRA_CPUSET_bad": "not-a-cpu"}, "malformed DRA env entry"),
        ("empty", {"DRA_CPUSET_novalue": ""}, "malformed DRA env entry"),
    ],
    ids=["garbage-cpuset", "empty-cpuset"],
)
def test_a_refused_container_fails_in_crictl_and_the_plugin_says_why(
    stack: Stack, name: str, env: dict[str, str], reason: str
) -> None:
    node, dev = stack.node, stack.dev
    pod = node.run_pod(f"refusals-{name}")
    name = f"refused-{name}"
    with pytest.raises(NodeError) as refused:
        node.create_container(pod, name, env=env)
    assert reason in str(refused.value)
    wait_for(
        lambda: any(
            "refused container" in line and f"container={name}" in line and "pod=" in line
            for line in dev.service_log("nri-plugin").splitlines()
        ),
        "the refusal in the nri-plugin log",
        timeout=10,
        interval=0.5,
    )
    node.remove_pod(pod)


def _running_view(dev: DevUp, container_ids: set[str]) -> bool:
    if not dev.ready():
        return False
    view = {c["container_id"]: c for c in dev.containers()}
    return all(cid in view and view[cid]["state"] == "running" for cid in container_ids)


@pytest.mark.parametrize("restart", ["nri-plugin", "containerd"])
def test_after_a_restart_the_plugin_knows_the_containers_and_pins_new_ones(
    stack: Stack, restart: str
) -> None:
    node, dev = stack.node, stack.dev
    pod = node.run_pod(f"restart-{restart}")
    claim = dev.claim(f"rs-{restart}", pod_uid=node.pod_uid(pod))
    claimed = node.run_container(pod, "claimed", cdi_devices=claim.cdi_devices)
    shared = node.run_container(pod, "shared")
    pool = dev.shared_pool()

    if restart == "nri-plugin":
        pid = dev.service_pid("nri-plugin")
        os.kill(pid, signal.SIGKILL)  # the supervisor of dev up starts it again
        wait_for(
            lambda: dev.service_pid("nri-plugin") != pid,
            "a new nri-plugin",
            timeout=30,
            interval=0.5,
        )
    else:
        node.restart()
    wait_for(
        lambda: _running_view(dev, {claimed.id, shared.id}),
        "the resynchronized view",
        timeout=60,
        interval=0.5,
    )

    assert node.allowed_cpus(claimed.id) == claim.cpuset
    assert node.allowed_cpus(shared.id) == pool
    later = node.run_container(pod, "later")
    assert node.allowed_cpus(later.id) == pool
    assert node.cgroup_cpus(later.id) == pool

    node.remove_pod(pod)
    dev.release(claim.name)
    wait_for(lambda: dev.shared_pool() == ONLINE, "the pool to grow back", timeout=30, interval=0.5)
