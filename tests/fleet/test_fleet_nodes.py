"""The chart with its default values (and the operator's slow-node values file) on a fleet of
two unlike nodes: the host (2 CPUs, one NUMA node, cgroup v1, CRI-O) and the guest (8 CPUs, 2
sockets, 2 NUMA nodes, cgroup v2, containerd). Each node's driver is on its own pod network,
publishes its own slices, pins its own claimed pod (read from its own kernel) and is scraped by
pod IP from a pod of the release's namespace on its node."""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest
from fleet.nodes import GUEST_NODE, GUEST_POD, HOST_POD, Fleet
from harness.cgroups import Cgroups, Layout
from harness.cluster import NAMESPACE, RELEASE, claim_cpus, step
from harness.scraper import assert_scraped, scraper_manifest
from harness.speed import budget
from harness.waits import wait_for

from dracpu.core.cpuset import CPUSet

pytestmark = [pytest.mark.fleet, pytest.mark.timeout(2700)]

API_PORT = 8080  # the chart's default (healthzPort), on the pod's own IP


def test_each_node_runs_its_driver_ready_on_its_own_pod_network(fleet: Fleet) -> None:
    ready = fleet.ready_drivers()
    assert set(ready) == set(fleet.nodes)
    for node, pod in ready.items():
        assert not pod["spec"].get("hostNetwork"), node
        address = ipaddress.ip_address(pod["status"]["podIP"])
        assert address in ipaddress.ip_network(fleet.cidrs[node]), (node, str(address))
        assert pod["status"]["podIP"] != pod["status"]["hostIP"], node
    # Two unlike nodes: their runtimes as the kubelets report them, their cgroup layouts.
    runtimes = {
        node: fleet.host.get("node", node, namespace="")["status"]["nodeInfo"][
            "containerRuntimeVersion"
        ]
        for node in fleet.nodes
    }
    assert runtimes[fleet.host.node].startswith("cri-o://"), runtimes
    assert runtimes[GUEST_NODE].startswith("containerd://"), runtimes
    assert Cgroups().effective_layout in (Layout.V1, Layout.HYBRID)
    assert fleet.guest.guest.call("kernel")["cgroup2"]


def test_each_node_publishes_its_own_devices(fleet: Fleet, idle: dict[str, dict[str, int]]) -> None:
    # The guest: one device per NUMA node, CPU 0 kept for the shared pool (minSharedCPUs 1).
    assert idle[GUEST_NODE] == {"cpudevnuma000": 3, "cpudevnuma001": 4}
    # The host: its one NUMA node, every online CPU but the shared pool's floor.
    assert list(idle[fleet.host.node].values()) == [len(fleet.host.online()) - 1]
    for node in fleet.nodes:
        for published in fleet.slices_of(node):
            assert published["spec"]["driver"] == "dra.cpu"
            assert published["spec"]["pool"]["name"] == node


def test_a_claim_only_the_guest_can_hold_is_scheduled_there_on_numa_node_1(
    claimed: Fleet,
) -> None:
    pod = claimed.host.get("pod", GUEST_POD)
    assert pod["spec"]["nodeName"] == GUEST_NODE
    claim = claimed.host.get("resourceclaim", GUEST_POD)
    (term,) = claim["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"]
    assert term["matchFields"][0]["values"] == [GUEST_NODE]
    # The guest kernel: the container's mask and its cgroup v2 cpuset (cpus_of checks them
    # equal), and the claim's CPUs the driver handed it.
    cpus = claimed.guest.cpus_of(GUEST_POD, "work")
    assert cpus == CPUSet.range(4, 7)
    assert claim_cpus(claimed.guest.env_of(GUEST_POD, "work")) == cpus


def test_a_claimed_pod_on_the_host_is_pinned_in_its_cgroup_v1_cpuset(claimed: Fleet) -> None:
    pod = claimed.host.get("pod", HOST_POD)
    assert pod["spec"]["nodeName"] == claimed.host.node
    cpus = claimed.host.cpus_of(HOST_POD, "work")
    assert len(cpus) == 1
    assert claimed.host.cgroup_cpuset_of(HOST_POD, "work") == cpus
    assert claim_cpus(claimed.host.env_of(HOST_POD, "work")) == cpus


def test_each_driver_is_scraped_by_pod_ip_from_its_own_node(fleet: Fleet) -> None:
    drivers = fleet.ready_drivers()
    scrapers = {node: f"scraper-{i}" for i, node in enumerate(fleet.nodes)}
    try:
        with step("fleet: a scraper pod on each node fetches its driver's /metrics by pod IP"):
            for node, name in scrapers.items():
                fleet.host.apply(
                    scraper_manifest(name, drivers[node]["status"]["podIP"], API_PORT, node=node),
                    NAMESPACE,
                )

            def ended() -> dict[str, dict[str, Any]] | None:
                found = {n: fleet.host.get("pod", s, NAMESPACE) for n, s in scrapers.items()}
                phases = [p.get("status", {}).get("phase") for p in found.values()]
                return found if all(p in ("Succeeded", "Failed") for p in phases) else None

            seen = wait_for(ended, "both scraper pods ended", timeout=budget(300), interval=1.0)
        for node, scraper in seen.items():
            output = fleet.host.kubectl("logs", "-n", NAMESPACE, scrapers[node])
            assert scraper["spec"]["nodeName"] == node
            assert not scraper["spec"].get("hostNetwork")
            address = ipaddress.ip_address(scraper["status"]["podIP"])
            assert address in ipaddress.ip_network(fleet.cidrs[node]), (node, str(address))
            assert scraper["status"]["phase"] == "Succeeded", (node, output)
            assert_scraped(output, where=node)
    finally:
        for name in scrapers.values():
            fleet.host.delete("pod", name, namespace=NAMESPACE)


def test_the_api_network_policy_selects_the_driver_pod_on_each_node(fleet: Fleet) -> None:
    """Neither node's pod network enforces NetworkPolicy (the CNI bridge plugin), so a pod of
    another namespace is not refused here: the policy object is what is checked."""
    policy = fleet.host.get("networkpolicy", f"{RELEASE}-api", NAMESPACE)
    selector = policy["spec"]["podSelector"]["matchLabels"]
    for node, pod in fleet.ready_drivers().items():
        labels = pod["metadata"]["labels"]
        assert all(labels.get(k) == v for k, v in selector.items()), node
    (rule,) = policy["spec"]["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": API_PORT}]
    assert rule["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NAMESPACE}}}
    ]
