"""A claim across both NUMA nodes. With the driver's own placement a claim stays inside one
device, and on this node a device is one NUMA node (groupBy numanode) or one socket, which is
one NUMA node too; so a claim spans both nodes only with groupBy machine, where the external
allocator names its CPUs. The driver then enforces exactly those CPUs, as the guest kernel
shows them, and keeps the rest for the shared pool."""

from __future__ import annotations

import pytest
from harness.guest import Guest

from dracpu.core.cpuset import CPUSet

pytestmark = [pytest.mark.bignode, pytest.mark.realnode, pytest.mark.timeout(900)]

DRIVER_CONFIG = (
    "apiVersion: v1alpha1\ncpuDeviceMode: grouped\ngroupBy: machine\nallocator: external\n"
)


def test_a_claim_spanning_both_numa_nodes_runs_on_exactly_its_cpus(node: Guest) -> None:
    devices = node.call("devices")
    assert len(devices) == 1 and devices[0]["cpu_ids"] == "1-7", devices  # CPU 0: the floor
    pod = node.call("pod", name="span")
    made = node.call("claim", name="span", cpus=4, pod_uid=pod["uid"], cpuset="2-5")
    assert made["cpuset"] == "2-5"
    seen = node.call("container", pod_id=pod["id"], name="span", cdi=made["cdi"])
    assert seen["cpus_allowed"] == seen["cpus_effective"] == "2-5", seen
    shared = node.call("container", pod_id=pod["id"], name="shared")
    assert shared["cpus_allowed"] == shared["cpus_effective"] == "0-1,6-7", shared
    assert CPUSet.parse(node.call("shared_pool")) == CPUSet.parse("0-1,6-7")


def test_a_local_claim_spanning_both_numa_nodes_allocates_from_both(node: Guest) -> None:
    """memoryPlacement local follows the claim's CPUs, not its device: the spanning claim gets
    both nodes, one inside node 1 of the same machine-wide device gets node 1 only."""
    pod = node.call("pod", name="spanmem")
    span = node.call(
        "claim", name="spanmem", cpus=4, pod_uid=pod["uid"], cpuset="2-5", memory_placement="local"
    )
    inside = node.call(
        "claim", name="inside1", cpus=2, pod_uid=pod["uid"], cpuset="6-7", memory_placement="local"
    )
    spanning = node.call("container", pod_id=pod["id"], name="span", cdi=span["cdi"])
    assert spanning["cpus_allowed"] == spanning["cpus_effective"] == "2-5", spanning
    assert spanning["mems_allowed"] == spanning["mems_effective"] == "0-1", spanning
    assert spanning["spec_mems"] == "0-1", spanning
    within = node.call("container", pod_id=pod["id"], name="inside", cdi=inside["cdi"])
    assert within["cpus_allowed"] == within["cpus_effective"] == "6-7", within
    assert within["mems_allowed"] == within["mems_effective"] == "1", within
    assert within["spec_mems"] == "1", within
    shared = node.call("container", pod_id=pod["id"], name="shared")
    assert shared["mems_allowed"] == shared["mems_effective"] == "0-1", shared
    assert shared["spec_mems"] == "", shared
