"""The big-node guest's cluster is a whole cluster: `kubectl logs`, `exec` and `port-forward`
reach its pods (the API server dials the guest's kubelet through its egress proxy and qemu's
forward on the host's loopback: tests/bignode/cluster.py), and pods without hostNetwork run on
the guest's CNI bridge (10.244.0.0/24), which has no route out of the guest but the one to the
`kubernetes` Service address, which the node relays to the API server.

Two pods for the module, both off the host network: `web`, whose container holds a claim of two
CPUs, prints its Cpus_allowed_list and serves it over HTTP; `peer`, unclaimed, sleeps. Every
CPU set checked is also read from the guest kernel (the container's /proc status and cgroup)."""

from __future__ import annotations

import ipaddress
import json
import time
from collections.abc import Iterator

import httpx
import pytest
from bignode.cluster import POD_TIMEOUT, GuestCluster, clear
from e2e.scenarios import start_pod
from harness.cluster import NAMESPACE, claim_cpus, claim_manifest, cpus_request, pod_manifest
from harness.guest import NODE_IP, POD_CIDR, SERVICE_ADDRESS
from harness.waits import WaitTimeout, wait_for

from dracpu.core.cpuset import CPUSet

# Longer than the cluster's bring-up (see test_bignode_cluster.py), in case this module is the
# first of the cluster's to run.
pytestmark = [pytest.mark.bignode, pytest.mark.timeout(2700)]
IN_CLUSTER = True  # conftest: after the bed's modules; the bed gives way to the cluster

PORT = 8000
# The claimed container: its own CPUs on stdout and as the page it serves; ends on SIGTERM.
WEB = [
    "sh",
    "-c",
    "trap 'exit 0' TERM; mkdir -p /tmp/www;"
    " grep Cpus_allowed_list /proc/self/status | tee /tmp/www/index.html;"
    f" busybox httpd -f -p {PORT} -h /tmp/www & wait",
]
OFF_HOST_NETWORK = {"hostNetwork": False}
# What the guest shows of its pod network when a pod gets no sandbox.
NETWORK_STATE = (
    "ip -br link; ip -br addr; ip route; ls -l /run/netns /var/lib/cni/networks/*;"
    " cat /run/dracpu-node/cni/*.conflist; df -h /run /var/lib; tail -n 5 /run/dracpu-node/logs/"
    "containerd.log"
)


def _why_not_running(cluster: GuestCluster, pod: str) -> str:
    """The pod's events and the guest's pod network as the node has it: what a sandbox the
    runtime could not give a network needs to be understood."""
    events = cluster.kubectl(
        "get", "events", "--field-selector", f"involvedObject.name={pod}",
        "-o", "custom-columns=REASON:.reason,MESSAGE:.message", check=False,
    )  # fmt: skip
    network = cluster.guest.call_op(
        {"op": "sh", "timeout": 60, "argv": ["sh", "-c", NETWORK_STATE]}, timeout=90
    )
    return f"events of {pod}:\n{events}\nthe guest's pod network:\n{network.get('stdout', '')}"


def kernel_line(cpus: CPUSet) -> str:
    return f"Cpus_allowed_list:\t{cpus}"


@pytest.fixture(scope="module")
def pods(guest_cluster: GuestCluster, idle_capacity: dict[str, int]) -> Iterator[GuestCluster]:
    """`web` (claimed) and `peer` Running on the pod network; removed by the next test's
    clean-up (or with the cluster)."""
    began = time.monotonic()
    clear(guest_cluster, idle_capacity)
    guest_cluster.apply(claim_manifest("web-cpus", [cpus_request(2)]))
    web = json.loads(
        pod_manifest("web", [("work", ["c"])], [("c", "web-cpus")], extra_spec=OFF_HOST_NETWORK)
    )
    web["spec"]["containers"][0]["command"] = WEB
    peer = pod_manifest("peer", [("work", [])], extra_spec=OFF_HOST_NETWORK)
    for name, manifest in (("web", json.dumps(web)), ("peer", peer)):
        try:
            start_pod(guest_cluster, name, manifest, POD_TIMEOUT)
        except WaitTimeout as late:
            raise AssertionError(f"{late}\n{_why_not_running(guest_cluster, name)}") from None
    print(f"bignode: two pods on the pod network in {time.monotonic() - began:.1f} s")
    yield guest_cluster


def claimed(cluster: GuestCluster) -> CPUSet:
    """The web container's CPUs, as the guest kernel has them and as its claim's env says."""
    cpus = cluster.cpus_of("web", "work")
    assert cpus == claim_cpus(cluster.env_of("web", "work")) and len(cpus) == 2, cpus
    return cpus


def test_kubectl_logs_shows_what_the_claimed_container_printed(pods: GuestCluster) -> None:
    logs = wait_for(
        lambda: pods.kubectl("logs", "web", "-c", "work").strip(),
        "web's first line in kubectl logs",
        timeout=POD_TIMEOUT,
    )
    assert logs == kernel_line(claimed(pods))


def test_kubectl_exec_runs_its_process_on_the_claimed_cpus(pods: GuestCluster) -> None:
    """A process exec'd into the container joins its cgroup: the claim's CPUs, nothing else."""
    seen = pods.kubectl("exec", "web", "-c", "work", "--", "grep", "Cpus_allowed_list",
                        "/proc/self/status")  # fmt: skip
    assert seen.strip() == kernel_line(claimed(pods))
    # The unclaimed pod's process is on the shared pool: everything the claim does not hold.
    seen = pods.kubectl("exec", "peer", "--", "grep", "Cpus_allowed_list", "/proc/self/status")
    assert seen.strip() == kernel_line(pods.online() - claimed(pods))


def test_pods_reach_each_other_on_the_bridge_and_have_no_route_out(pods: GuestCluster) -> None:
    network = ipaddress.ip_network(POD_CIDR)
    addresses = {name: pods.get("pod", name)["status"]["podIP"] for name in ("web", "peer")}
    assert all(ipaddress.ip_address(a) in network for a in addresses.values()), addresses
    assert len(set(addresses.values())) == 2 and NODE_IP not in addresses.values()
    # (busybox's `wget -T` crashes: a stuck fetch ends at the harness's 300 s per kubectl call)
    page = pods.kubectl(
        "exec",
        "peer",
        "--",
        "busybox",
        "wget",
        "-q",
        "-O",
        "-",
        f"http://{addresses['web']}:{PORT}/",
    )
    assert page.strip() == kernel_line(claimed(pods))
    # The pod's routes: its bridge's range and the API server's Service address through the
    # bridge (the node's relay of it), nothing else (no default route).
    routes = pods.kubectl("exec", "peer", "--", "busybox", "ip", "route").strip().splitlines()
    gateway = str(next(network.hosts()))
    assert sorted(route.split()[:3] for route in routes) == sorted(
        [[SERVICE_ADDRESS.split(":")[0], "via", gateway], [str(network), "dev", "eth0"]]
    ), routes


def test_kubectl_port_forward_reaches_the_pod_and_the_drivers_api(pods: GuestCluster) -> None:
    cpus = claimed(pods)
    with pods.port_forward("pod/web", PORT) as local:
        page = httpx.get(f"http://127.0.0.1:{local}/", timeout=POD_TIMEOUT)
    assert page.status_code == 200 and page.text.strip() == kernel_line(cpus)
    # The node's allocation view, through a forward into the driver's pod.
    driver = pods.driver_pod()
    assert driver is not None
    uid = pods.get("resourceclaim", "web-cpus")["metadata"]["uid"]
    with pods.port_forward(f"pod/{driver['metadata']['name']}", pods.api_port, NAMESPACE) as local:
        claim = httpx.get(f"http://127.0.0.1:{local}/v1/claims/{uid}", timeout=POD_TIMEOUT)
    assert claim.status_code == 200, claim.text
    view = claim.json()
    assert (view["name"], view["cpus"]) == ("web-cpus", str(cpus))
