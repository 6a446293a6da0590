"""Socket-grouped claims (groupBy socket) on the guest's two sockets: the devices are one per
socket, and a claim's container runs inside the socket its device stands for, as the kernel
shows it (cgroup v2 cpuset.cpus.effective and Cpus_allowed_list)."""

from __future__ import annotations

import pytest
from harness.guest import Guest

from dracpu.core.cpuset import CPUSet

pytestmark = [pytest.mark.bignode, pytest.mark.realnode, pytest.mark.timeout(900)]

DRIVER_CONFIG = "apiVersion: v1alpha1\ncpuDeviceMode: grouped\ngroupBy: socket\n"
SOCKETS = (CPUSet.parse("0-3"), CPUSet.parse("4-7"))


def test_socket_grouped_claims_run_inside_their_socket(node: Guest) -> None:
    devices = node.call("devices")
    # One device per socket; the shared floor (CPU 0) comes off socket 0's.
    assert [d["capacity"] for d in devices] == [3, 4], devices
    pod = node.call("pod", name="sockets")
    whole = node.call("claim", name="whole", cpus=4, pod_uid=pod["uid"])
    part = node.call("claim", name="part", cpus=2, pod_uid=pod["uid"])
    # Only socket 1 has 4 CPUs to give; the 2-CPU claim then fits only in socket 0.
    assert CPUSet.parse(whole["cpuset"]) == SOCKETS[1]
    assert CPUSet.parse(part["cpuset"]).issubset(SOCKETS[0])
    for made in (whole, part):
        seen = node.call("container", pod_id=pod["id"], name=made["name"], cdi=made["cdi"])
        assert CPUSet.parse(seen["cpus_allowed"]) == CPUSet.parse(made["cpuset"]), seen
        assert CPUSet.parse(seen["cpus_effective"]) == CPUSet.parse(made["cpuset"]), seen
    shared = node.call("container", pod_id=pod["id"], name="shared")
    rest = SOCKETS[0] - CPUSet.parse(part["cpuset"])
    assert CPUSet.parse(shared["cpus_effective"]) == rest == CPUSet.parse(shared["cpus_allowed"])
