"""The chart on a one-node cluster whose node is the big-node guest (8 CPUs as 2 sockets x 2
cores x 2 threads, NUMA nodes 0-3 and 4-7, cgroup v2; its kubelet and containerd in the guest,
the control plane on the host): the e2e scenarios two CPUs cannot hold, run by the same code as
tests/e2e (tests/e2e/scenarios.py). Every CPU set is the guest kernel's: a container's
Cpus_allowed_list, equal to its cgroup's cpuset.cpus.effective."""

from __future__ import annotations

import pytest
from bignode.cluster import POD_TIMEOUT, GuestCluster
from e2e.scenarios import claim_everything_published, pod_level_resources
from harness.cluster import NAMESPACE, SERVICES

from dracpu.core.cpuset import CPUSet

# Longer than the cluster's bring-up waits (node Ready 300 s, driver pod 900 s, slices 120 s,
# the guest's containerd and kubelet start) that the first test's setup holds.
pytestmark = [pytest.mark.bignode, pytest.mark.timeout(2700)]
IN_CLUSTER = True  # conftest: after the bed's modules; the bed gives way to the cluster

NUMA = (CPUSet.range(0, 3), CPUSet.range(4, 7))
FLOOR = CPUSet([0])  # minSharedCPUs 1: never published, always the shared pool's


def numa_node_of(cpus: CPUSet) -> int | None:
    return next((n for n, node_cpus in enumerate(NUMA) if cpus.issubset(node_cpus)), None)


def driver_cpus(node: GuestCluster) -> dict[str, CPUSet]:
    pod = node.driver_pod()
    assert pod is not None
    name = pod["metadata"]["name"]
    return {service: node.cpus_of(name, service, NAMESPACE) for service in SERVICES}


def test_the_guests_kubelet_gets_one_device_per_numa_node(in_cluster: GuestCluster) -> None:
    devices = in_cluster.published().items()
    published = {name: int(d["capacity"]["dra.cpu/cpu"]["value"]) for name, d in devices}
    assert published == {"cpudevnuma000": 3, "cpudevnuma001": 4}
    assert in_cluster.online() == CPUSet.range(0, 7)
    # Nothing claimed: the driver's own containers have every CPU.
    assert set(driver_cpus(in_cluster).values()) == {CPUSet.range(0, 7)}


def test_pod_level_resources_with_three_claimed_containers_and_a_claimed_sidecar(
    in_cluster: GuestCluster,
) -> None:
    """The sidecar starts first and is pinned first; the three containers started after it
    move neither it nor each other (each is checked once all four run)."""
    seen = pod_level_resources(in_cluster, [2, 1, 2], sidecar=1, timeout=POD_TIMEOUT)
    claimed = ("app0", "app1", "app2", "sidecar")
    for name in claimed:
        assert numa_node_of(seen[name]) is not None, (name, seen[name])  # one device: one node
    for name in ("app0", "app2"):  # two CPUs: one core's SMT pair, whole cores first
        first = seen[name].first()
        assert seen[name] == CPUSet([first, first + 1]) and first % 2 == 0, (name, seen[name])
    held = CPUSet()
    for name in claimed:
        held = held | seen[name]
    assert seen["plain"] == in_cluster.online() - held


def test_two_claims_take_everything_published_and_the_floor_stays_shared(
    in_cluster: GuestCluster,
) -> None:
    assert claim_everything_published(in_cluster, timeout=POD_TIMEOUT) == FLOOR
    # The 4-CPU claim fits only node 1's device, the 3-CPU one takes node 0's but the floor.
    held = [in_cluster.cpus_of(f"all{i}", "work") for i in range(2)]
    assert held == [NUMA[1], NUMA[0] - FLOOR]
    # The driver's own containers are shared containers: the floor is all they have left.
    assert set(driver_cpus(in_cluster).values()) == {FLOOR}
