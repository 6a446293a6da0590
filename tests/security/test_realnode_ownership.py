"""Claim ownership on a real containerd + runc: what the kernel says a container runs on.

A container's `DRA_CPUSET_<uid>` env only names a claim; the pod author controls it. A pod of
another namespace, or one the claim is not reserved for, that copies a prepared claim's env is
refused by the nri-plugin (crictl create fails with the reason), so nothing of it runs on the
claim's CPUs, while the claim's own container is pinned to them. A container started while the
plugin was away, carrying a made-up claim, is quarantined when the plugin synchronizes: no CPU
leaves the shared pool, no CDI spec or record is written, a warning names it, and a claim
prepared afterwards gets its CPUs to itself.

The machine's CPUs are few (the tier runs on 2); the allocator keeps the lowest CPU shared, so
one 1-CPU claim fits at a time. Runs on the session's real-node bed (`realnode_stack`), the one
tests/realnode runs on.
"""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness.containerd_node import ContainerdNode, NodeError
from harness.dev_up import DevUp
from harness.realnode_stack import Stack
from harness.waits import wait_for

from dracpu.core.cpuset import CPUSet

pytestmark = [pytest.mark.realnode, pytest.mark.security, pytest.mark.timeout(600)]

ONLINE = Path("/sys/devices/system/cpu/online").read_text().strip()


@pytest.fixture
def node_and_dev(realnode_stack: Stack) -> Iterator[tuple[ContainerdNode, DevUp]]:
    if len(CPUSet.parse(ONLINE)) < 2:
        pytest.skip(f"needs 2 online CPUs for a claim next to the shared pool, has {ONLINE}")
    yield realnode_stack.node, realnode_stack.dev
    # Whatever a test left: its pods and claims go, the pool is whole again for the next one.
    for pod_id in realnode_stack.node.pods():
        realnode_stack.node.remove_pod(pod_id)
    for left in realnode_stack.dev.get("/v1/claims")["claims"]:
        realnode_stack.dev.release(left["name"])
    wait_for(
        lambda: realnode_stack.dev.shared_pool() == ONLINE,
        "the pool to be whole again",
        timeout=30,
        interval=0.5,
    )


def kernel_view(node: ContainerdNode, container_id: str) -> tuple[str, str]:
    """(cgroup cpuset.cpus, Cpus_allowed_list of its process)."""
    return node.cgroup_cpus(container_id), node.allowed_cpus(container_id)


def containers_of(node: ContainerdNode, pod_id: str) -> list[str]:
    return node.crictl("ps", "-a", "-q", "--pod", pod_id).stdout.split()


def test_another_pods_copy_of_the_claim_env_gets_none_of_its_cpus(
    node_and_dev: tuple[ContainerdNode, DevUp],
) -> None:
    node, dev = node_and_dev
    owner = node.run_pod("own-owner", namespace="default")
    claim = dev.claim("own-1", pod_uid=node.pod_uid(owner))
    stolen = {claim.env_key: claim.cpuset}
    pool = dev.shared_pool()
    assert not CPUSet.parse(pool) & CPUSet.parse(claim.cpuset)

    # Another namespace, and a pod of the claim's namespace it is not reserved for.
    intruder = node.run_pod("own-intruder", namespace="intruder")
    neighbour = node.run_pod("own-neighbour", namespace="default")
    for pod, reason in ((intruder, "namespace"), (neighbour, "reserved for pods")):
        with pytest.raises(NodeError) as refused:
            node.create_container(pod, "hijack", env=stolen)
        assert reason in str(refused.value)
        assert containers_of(node, pod) == []  # nothing of it was created, let alone ran
        # What the pod may run is a shared container: the pool, none of the claim's CPUs.
        shared = node.run_container(pod, "shared")
        assert kernel_view(node, shared.id) == (pool, pool)

    legit = node.run_container(owner, "app", cdi_devices=claim.cdi_devices)
    assert kernel_view(node, legit.id) == (claim.cpuset, claim.cpuset)
    # Once it runs, copying its env is still refused; the owner keeps its CPUs.
    with pytest.raises(NodeError, match="namespace"):
        node.create_container(intruder, "hijack-later", env=stolen)
    assert kernel_view(node, legit.id) == (claim.cpuset, claim.cpuset)
    refusals = [
        line
        for line in dev.service_log("nri-plugin").splitlines()
        if "refused container" in line and "container=hijack" in line
    ]
    assert len(refusals) >= 3

    node.remove_container(legit.id)
    dev.release(claim.name)


def test_a_made_up_claim_started_while_the_plugin_was_away_is_quarantined(
    node_and_dev: tuple[ContainerdNode, DevUp],
) -> None:
    node, dev = node_and_dev
    made_up = str(uuid.uuid4())
    # The CPU a claim would get: every CPU but the shared-pool floor (the lowest).
    target = str(CPUSet.parse(ONLINE).last())
    pod = node.run_pod("own-forger", namespace="forger")
    log_before = len(dev.service_log("nri-plugin").splitlines())

    pid = dev.service_pid("nri-plugin")
    os.kill(pid, signal.SIGSTOP)
    try:
        # containerd waits its request timeout for the plugin, drops it, creates anyway.
        forged = node.run_container(pod, "forged", env={f"DRA_CPUSET_{made_up}": target})
    finally:
        os.kill(pid, signal.SIGCONT)
    assert kernel_view(node, forged.id) == (ONLINE, ONLINE)

    def quarantined() -> list[str]:
        lines = dev.service_log("nri-plugin").splitlines()[log_before:]
        return [
            line
            for line in lines
            if "claim on running container quarantined" in line and made_up in line
        ]

    (warning,) = wait_for(quarantined, "the quarantine warning", timeout=60, interval=0.5)
    assert f"container={forged.id}" in warning
    wait_for(lambda: dev.ready(), "the api after the resync", timeout=30, interval=0.5)

    # Nothing was taken: the pool is the whole machine, and the forged container and a new
    # shared one run on it (the CPU its env names is not made its own).
    assert dev.shared_pool() == ONLINE
    assert kernel_view(node, forged.id) == (ONLINE, ONLINE)
    shared = node.run_container(pod, "shared")
    assert kernel_view(node, shared.id) == (ONLINE, ONLINE)
    assert not [p for p in (dev.run_dir / "cdi").rglob("*") if made_up in p.name]
    assert not [p for p in (dev.run_dir / "state").rglob("*") if made_up in p.name]
    assert made_up not in str(dev.get("/v1/claims"))

    # A claim prepared now gets the CPU the forged env named, and gets it to itself.
    owner = node.run_pod("own-after", namespace="default")
    claim = dev.claim("own-after", pod_uid=node.pod_uid(owner))
    assert claim.cpuset == target
    legit = node.run_container(owner, "app", cdi_devices=claim.cdi_devices)
    assert kernel_view(node, legit.id) == (claim.cpuset, claim.cpuset)
    rest = (CPUSet.parse(ONLINE) - CPUSet.parse(claim.cpuset)).format()
    wait_for(
        lambda: node.allowed_cpus(shared.id) == rest,
        "the shared container to shrink",
        timeout=30,
        interval=0.5,
    )

    # The forged container is a shared one: it follows the pool off the claim's CPU.
    wait_for(
        lambda: node.allowed_cpus(forged.id) == rest,
        "the forged container to shrink",
        timeout=30,
        interval=0.5,
    )
    assert kernel_view(node, forged.id) == (rest, rest)
    assert kernel_view(node, legit.id) == (claim.cpuset, claim.cpuset)

    node.remove_container(legit.id)
    dev.release(claim.name)
