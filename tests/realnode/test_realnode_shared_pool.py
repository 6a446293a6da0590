"""`cpuConfig.sharedPool: include` on a real runtime + runc, read from the kernel: the container
runs on its claim's CPUs and the shared pool (`Cpus_allowed_list` in /proc/<pid>/status and its
cgroup's cpuset), follows the pool when another claim takes its CPUs and gives them back, and
no other container ever runs on its claim's CPUs.

This host has two CPUs. The session's bed keeps one for the shared pool (minSharedCPUs 1), so it
holds one claim at a time; this module runs its own bed without that floor, so a second claim
can take the pool's last CPU: the pool goes from one CPU to none and back.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from harness.containerd_node import ContainerdNode
from harness.realnode_stack import Stack, finish_stack, start_stack
from harness.waits import wait_for

from dracpu.core.cpuset import CPUSet

pytestmark = pytest.mark.realnode

ONLINE = CPUSet.parse(Path("/sys/devices/system/cpu/online").read_text().strip())


@pytest.fixture(scope="module")
def unfloored(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A bed whose shared pool may be emptied by claims (minSharedCPUs 0)."""
    config = tmp_path_factory.mktemp("shared-pool") / "config.yaml"
    config.write_text("minSharedCPUs: 0\n")
    stack = start_stack(dev_extra=("--config", str(config)))
    failed = False
    try:
        yield stack
    except BaseException:
        failed = True
        raise
    finally:
        finish_stack(stack, failed)


def kernel_cpus(node: ContainerdNode, container_id: str) -> tuple[CPUSet, CPUSet]:
    """What the kernel lets the container's process run on: its Cpus_allowed_list, and its
    cgroup's cpuset."""
    allowed = CPUSet.parse(node.allowed_cpus(container_id))
    cgroup = CPUSet.parse(node.cgroup_cpus(container_id))
    return allowed, cgroup


def others_on(node: ContainerdNode, cpus: CPUSet, owner: str) -> list[str]:
    """Every running container of the node but `owner` the kernel lets run on `cpus`."""
    return [
        cid
        for cid in node.containers()
        if cid != owner and CPUSet.parse(node.allowed_cpus(cid)) & cpus
    ]


def test_a_mixed_container_runs_on_its_claim_and_the_pool_as_the_pool_changes(
    unfloored: Stack,
) -> None:
    node, dev = unfloored.node, unfloored.dev
    assert len(ONLINE) >= 2, "the scenario needs two CPUs"
    pod = node.run_pod("mixed")
    claim = dev.claim("mixed1", pod_uid=node.pod_uid(pod), shared_pool="include")
    claimed = CPUSet.parse(claim.cpuset)
    mixed = node.run_container(pod, "pmd", cdi_devices=claim.cdi_devices)
    shared = node.run_container(pod, "housekeeping")
    pool = CPUSet.parse(dev.shared_pool())
    assert pool == ONLINE - claimed

    # The claim's CPUs and the pool, in the kernel; the env tells the two parts apart.
    assert kernel_cpus(node, mixed.id) == (claimed | pool, claimed | pool)
    env = dict(
        line.split("=", 1) for line in node.exec(mixed.id, "env").splitlines() if "=" in line
    )
    assert CPUSet.parse(env[claim.env_key]) == claimed
    assert CPUSet.parse(env[f"DRA_SHARED_CPUSET_{claim.uid}"]) == pool
    # The shared container is on the pool alone: the claim's CPUs are the mixed one's.
    assert kernel_cpus(node, shared.id) == (pool, pool)
    assert others_on(node, claimed, mixed.id) == []

    # The api and the claim say so.
    view = {c["container_id"]: c for c in dev.containers()}
    assert view[mixed.id]["runs_on"] == "claimed + shared"
    assert CPUSet.parse(view[mixed.id]["claimed_cpus"]) == claimed
    assert view[shared.id]["runs_on"] == "shared"
    assert dev.get(f"/v1/claims/{claim.uid}")["shared_pool"] == "include"

    # Another claim takes the pool's CPUs (the shared container goes first: no shared
    # container can run on an empty pool). Its container's creation moves the mixed one.
    node.remove_container(shared.id)
    other = dev.claim("mixed2", pod_uid=node.pod_uid(pod))
    taken = CPUSet.parse(other.cpuset)
    assert taken == pool
    pinned = node.run_container(pod, "other", cdi_devices=other.cdi_devices)
    assert CPUSet.parse(dev.shared_pool()) == CPUSet()
    wait_for(
        lambda: kernel_cpus(node, mixed.id) == (claimed, claimed),
        "the mixed container to leave the other claim's CPUs",
        timeout=30,
        interval=0.5,
    )
    assert kernel_cpus(node, pinned.id) == (taken, taken)
    assert others_on(node, claimed, mixed.id) == []
    assert others_on(node, taken, pinned.id) == []

    # Given back: the pool grows and the mixed container follows it without being recreated.
    node.remove_container(pinned.id)
    dev.release("mixed2")
    wait_for(
        lambda: CPUSet.parse(dev.shared_pool()) == pool,
        "the pool to grow back",
        timeout=30,
        interval=0.5,
    )
    if not dev.pushes_pool_changes():
        # A runtime the plugin does not push to: the change arrives with its next call.
        dev.wait_plugin_sees_pool()
        node.run_container(pod, "next")
    wait_for(
        lambda: kernel_cpus(node, mixed.id) == (claimed | pool, claimed | pool),
        "the mixed container to follow the pool back",
        timeout=30,
        interval=0.5,
    )
    later = node.run_container(pod, "later")
    assert kernel_cpus(node, later.id) == (pool, pool)
    assert others_on(node, claimed, mixed.id) == []

    node.remove_pod(pod)
    dev.release("mixed1")
    wait_for(
        lambda: CPUSet.parse(dev.shared_pool()) == ONLINE,
        "the pool to be whole again",
        timeout=30,
        interval=0.5,
    )
