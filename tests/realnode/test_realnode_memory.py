"""Memory placement on a real containerd + runc: the nri-plugin's CreateContainer adjustment
carries the claim's memory nodes as `linux.resources.cpu.mems`, containerd writes them into
the container's OCI spec, runc into its cpuset cgroup, and the kernel confines the process to
them. This host has one NUMA node, so a placed claim's value is node 0; what tells a placed
container from a shared one here is the spec: only the placed one has `mems` set. The value
holds through a containerd restart (Synchronize) and a CRI resource update."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from harness.containerd_node import ContainerdNode, cgroup_cpuset_mems, mems_allowed
from harness.realnode_stack import Stack
from harness.waits import wait_for

pytestmark = pytest.mark.realnode

NODES = Path("/sys/devices/system/node/online").read_text().strip()


def spec_cpu(node: ContainerdNode, container_id: str) -> dict[str, Any]:
    """linux.resources.cpu of the OCI spec containerd created the container with."""
    spec = node.inspect(container_id)["info"]["runtimeSpec"]
    cpu: dict[str, Any] = spec.get("linux", {}).get("resources", {}).get("cpu", {})
    return cpu


def kernel_mems(node: ContainerdNode, container_id: str) -> tuple[str, str]:
    pid = node.container_pid(container_id)
    return mems_allowed(pid), cgroup_cpuset_mems(pid)


def test_a_placed_claim_confines_its_containers_memory_and_shared_ones_keep_every_node(
    stack: Stack,
) -> None:
    """This host publishes one CPU (two online, one kept for the shared pool): one claim at a
    time."""
    node, dev = stack.node, stack.dev
    pod = node.run_pod("memory")
    placed = dev.claim("mem-local", pod_uid=node.pod_uid(pod), memory_placement="local")
    placed_ctr = node.run_container(pod, "placed", cdi_devices=placed.cdi_devices)
    shared_ctr = node.run_container(pod, "shared")

    # containerd took the adjustment into the spec, runc into the cgroup, the kernel applies it.
    assert spec_cpu(node, placed_ctr.id).get("mems") == "0"
    assert spec_cpu(node, placed_ctr.id).get("cpus") == placed.cpuset
    assert kernel_mems(node, placed_ctr.id) == ("0", "0")
    # Shared: no mems in the spec, every memory node of the host.
    assert not spec_cpu(node, shared_ctr.id).get("mems")
    assert kernel_mems(node, shared_ctr.id) == (NODES, NODES)

    # Where users look.
    (claim,) = [c for c in dev.get("/v1/claims")["claims"] if c["name"] == "mem-local"]
    assert claim["memory_nodes"] == "0"
    assert "dra_cpu_resource_claims_memory_placed 1" in dev.metrics()
    pinned = [
        line
        for line in dev.service_log("nri-plugin").splitlines()
        if "pinned container" in line and placed_ctr.id in line
    ]
    assert pinned and "mems=0" in pinned[-1]

    # A resource update from the kubelet's side (CRI UpdateContainerResources, here CPU
    # shares only) keeps what the plugin set: containerd merges it into the spec.
    node.crictl("update", "--cpu-share", "512", placed_ctr.id)
    assert spec_cpu(node, placed_ctr.id).get("shares") == 512
    assert spec_cpu(node, placed_ctr.id).get("mems") == "0"
    assert spec_cpu(node, placed_ctr.id).get("cpus") == placed.cpuset
    assert kernel_mems(node, placed_ctr.id) == ("0", "0")
    node.remove_pod(pod)
    dev.release("mem-local")

    # A claim that does not ask: the driver's default, none.
    pod = node.run_pod("memory-none")
    plain = dev.claim("mem-none", pod_uid=node.pod_uid(pod))
    plain_ctr = node.run_container(pod, "plain", cdi_devices=plain.cdi_devices)
    assert spec_cpu(node, plain_ctr.id).get("cpus") == plain.cpuset
    assert not spec_cpu(node, plain_ctr.id).get("mems")
    assert kernel_mems(node, plain_ctr.id) == (NODES, NODES)
    (claim,) = [c for c in dev.get("/v1/claims")["claims"] if c["name"] == "mem-none"]
    assert claim["memory_nodes"] == ""
    assert "dra_cpu_resource_claims_memory_placed 0" in dev.metrics()
    node.remove_pod(pod)
    dev.release("mem-none")


def test_the_placement_holds_through_a_containerd_restart(stack: Stack) -> None:
    node, dev = stack.node, stack.dev
    pod = node.run_pod("memory-restart")
    placed = dev.claim("mem-restart", pod_uid=node.pod_uid(pod), memory_placement="local")
    ctr = node.run_container(pod, "placed", cdi_devices=placed.cdi_devices)
    node.restart()
    wait_for(
        lambda: dev.ready() and any(c["container_id"] == ctr.id for c in dev.containers()),
        "the resynchronized view",
        timeout=60,
        interval=0.5,
    )
    assert spec_cpu(node, ctr.id).get("mems") == "0"
    assert kernel_mems(node, ctr.id) == ("0", "0")
    node.remove_pod(pod)
    dev.release("mem-restart")
