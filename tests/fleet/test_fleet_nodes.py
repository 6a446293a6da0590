"""The chart with its default values (and the operator's slow-node values file) on a fleet of
two unlike nodes: the host (2 CPUs, one NUMA node, cgroup v1, CRI-O) and the guest (8 CPUs, 2
sockets, 2 NUMA nodes, cgroup v2, containerd). Each node's driver is on its own pod network,
publishes its own slices, pins its own claimed pod (read from its own kernel) and is scraped by
pod IP from a pod of the release's namespace on its node."""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest
from fleet.network_policy import enforced, enforcer_binary
from fleet.nodes import GUEST_NODE, GUEST_POD, HOST_POD, Fleet
from harness.cgroups import Cgroups, Layout
from harness.cluster import NAMESPACE, RELEASE, claim_cpus, say, step
from harness.scraper import assert_scraped, scraper_manifest
from harness.speed import budget
from harness.waits import wait_for

from dracpu.core.cpuset import CPUSet

pytestmark = [pytest.mark.fleet, pytest.mark.timeout(2700)]

API_PORT = 8080  # the chart's default (healthzPort), on the pod's own IP
OUTSIDER = "outsider"  # a namespace that is not the release's
OUTSIDER_WAIT = 20  # seconds its scraper waits for an answer that does not come


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


def _scraped(fleet: Fleet, scrapers: dict[str, tuple[str, str]]) -> dict[str, Any]:
    """The scraper pods (name -> namespace, manifest) run to their end; each one's pod object
    and, under "output", what it printed. Removed afterwards."""
    try:
        for namespace, manifest in scrapers.values():
            fleet.host.apply(manifest, namespace)

        def ended() -> dict[str, Any] | None:
            found = {n: fleet.host.get("pod", n, ns) for n, (ns, _) in scrapers.items()}
            phases = [p.get("status", {}).get("phase") for p in found.values()]
            return found if all(p in ("Succeeded", "Failed") for p in phases) else None

        seen = wait_for(ended, "the scraper pods ended", timeout=budget(300), interval=1.0)
        for name, (namespace, _) in scrapers.items():
            seen[name]["output"] = fleet.host.kubectl("logs", "-n", namespace, name)
        return seen
    finally:
        for name, (namespace, _) in scrapers.items():
            fleet.host.delete("pod", name, namespace=namespace)


def test_each_driver_is_scraped_by_pod_ip_from_its_own_node(fleet: Fleet) -> None:
    drivers = fleet.ready_drivers()
    scrapers = {node: f"scraper-{i}" for i, node in enumerate(fleet.nodes)}
    with step("fleet: a scraper pod on each node fetches its driver's /metrics by pod IP"):
        seen = _scraped(fleet, {
            name: (NAMESPACE, scraper_manifest(
                name, drivers[node]["status"]["podIP"], API_PORT, node=node))
            for node, name in scrapers.items()
        })  # fmt: skip
    for node, name in scrapers.items():
        scraper = seen[name]
        assert scraper["spec"]["nodeName"] == node
        assert not scraper["spec"].get("hostNetwork")
        address = ipaddress.ip_address(scraper["status"]["podIP"])
        assert address in ipaddress.ip_network(fleet.cidrs[node]), (node, str(address))
        assert scraper["status"]["phase"] == "Succeeded", (node, scraper["output"])
        assert_scraped(scraper["output"], where=node)


def test_the_api_network_policy_selects_the_driver_pod_on_each_node(fleet: Fleet) -> None:
    """What the chart asks of a pod network that enforces NetworkPolicy: only the release's
    namespace reaches the api's port of a driver pod. The guest's node enforces it (the test
    below); the host's cannot, so there the object is what is checked."""
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


def test_on_the_enforcing_guest_node_only_the_release_namespace_reaches_the_driver(
    fleet: Fleet,
) -> None:
    """With kube-network-policies enforcing on the guest's node, a pod of another namespace on
    that node gets no answer from the driver's api (its packets refused by the enforcer's
    verdict, counted), while a pod of the release's namespace beside it is served, its packets
    judged and accepted."""
    binary, missing = enforcer_binary()
    if missing:
        pytest.skip(f"fleet: NetworkPolicy enforcement: {missing}")
    driver = fleet.ready_drivers()[GUEST_NODE]["status"]["podIP"]
    fleet.host.kubectl("create", "namespace", OUTSIDER, check=False)
    try:
        with enforced(fleet, binary, driver):
            before = fleet.guest.guest.call("network_policy_verdicts")
            with step("fleet: a pod of each namespace on the guest asks the driver's api"):
                seen = _scraped(fleet, {
                    "scraper-member": (NAMESPACE, scraper_manifest(
                        "scraper-member", driver, API_PORT, node=GUEST_NODE)),
                    "scraper-outsider": (OUTSIDER, scraper_manifest(
                        "scraper-outsider", driver, API_PORT, node=GUEST_NODE,
                        namespace=OUTSIDER, wait=OUTSIDER_WAIT)),
                })  # fmt: skip
            after = fleet.guest.guest.call("network_policy_verdicts")
            say(f"kube-network-policies verdicts: before {before}, after {after}")
    finally:
        fleet.host.kubectl("delete", "namespace", OUTSIDER, "--wait=false", check=False)
    member, outsider = seen["scraper-member"], seen["scraper-outsider"]
    assert member["status"]["phase"] == "Succeeded", member["output"]
    assert_scraped(member["output"], where=f"{GUEST_NODE}, enforcing")
    assert outsider["status"]["phase"] == "Failed", outsider["output"]
    assert "HTTP/" not in outsider["output"], outsider["output"]
    # Both went through the enforcer: the member's connections accepted, the outsider's
    # first packets (its SYN and the kernel's retries of it) dropped.
    assert after.get("accept", 0) > before.get("accept", 0), (before, after)
    assert after.get("drop", 0) > before.get("drop", 0), (before, after)
