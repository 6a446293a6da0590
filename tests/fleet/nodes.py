"""A fleet of two unlike nodes under one control plane, the chart installed once on both.

- **The host** (`tools/cluster.sh up`, DRACPU_RUNTIME=crio): the control plane, and a node on
  CRI-O 1.34 with the host's cgroup v1 and 2 CPUs, its pods on 10.244.0.0/24 (`cni0`).
- **The guest** (tests/harness/guest.py: 8 CPUs as 2 sockets x 2 cores x 2 threads, 2 NUMA
  nodes, cgroup v2) joins as a second node with `tools/cluster.sh node` on containerd 2.4, its
  pods on 10.244.1.0/24 (its own `cni0`). Its kubelet holds a client certificate
  `system:node:dracpu-bignode` signed by the host cluster's CA (bignode.cluster.node_kubeconfig)
  and reaches the API server at 10.96.0.1:443, which qemu forwards to the host's loopback. The
  guest's pods need that address too: the node puts it on its loopback and relays it to qemu's
  second address of the same forward, 10.96.0.4:443 (DRACPU_CLUSTER_SERVICE_UPSTREAM), and its
  pods get a route to it through their bridge, as the host's do.
- The API server reaches both kubelets through its egress selector: a CONNECT proxy
  (tools/tcp-forward.py connect) relays the host node's address to itself and the guest's to
  qemu's forward of its kubelet.

There is no routed pod network between the nodes: the guest reaches the host only through
qemu's forwards, so each node's pods reach their own node's pods (and the API server), not the
other node's.

Both nodes keep the cluster's state under one path, /run/dracpu-node (on the host a folder of
the root filesystem, in the guest its own tmpfs /run), so one release with one `kubeletRootDir`
serves both, as /var/lib/kubelet does on a fleet of ordinary nodes."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bignode import cluster as guest_cluster
from bignode.cluster import (
    POD_TIMEOUT,
    GuestCluster,
    egress_config,
    node_kubeconfig,
    slow_node_values,
    start_egress_proxy,
)
from harness.cluster import (
    NAMESPACE,
    PROGRESS,
    RELEASE,
    ROOT,
    Cluster,
    claim_manifest,
    cpus_request,
    pod_manifest,
    say,
    step,
)
from harness.guest import APISERVER_ALIAS, Guest
from harness.previous_release import release_source
from harness.release_dist import Dist
from harness.speed import budget
from harness.waits import wait_for
from skew.skew_builds import Release

PROGRESS["tier"] = "fleet"
CLUSTER_DIR = Path("/run/dracpu-node")  # both nodes' DRACPU_CLUSTER_DIR (inguest.CLUSTER_DIR)
HOST_CIDR = "10.244.0.0/24"
GUEST_CIDR = "10.244.1.0/24"
HOST_NODE_IP = "198.18.20.1"  # tools/cluster.sh's default node address
APISERVER_PORT = 17443  # tools/cluster.sh's default (DRACPU_CP_APISERVER_PORT)
GUEST_NODE = guest_cluster.NODE_NAME
# The tier's claimed pods (conftest `claimed`), each with a claim of its own name: one CPU on
# the host, four that only the guest's NUMA node 1 device offers.
HOST_POD = "pinned-host"
GUEST_POD = "pinned-guest"
# The host cluster as the fleet runs it: tools/cluster.sh reads these.
HOST_ENV = {
    "DRACPU_RUNTIME": "crio",
    "DRACPU_CLUSTER_DIR": str(CLUSTER_DIR),
    "DRACPU_CLUSTER_POD_CIDR": HOST_CIDR,
}


@dataclass
class Fleet:
    """The two nodes: `host` (the e2e harness's Cluster, the host's kernel) and `guest` (the
    big-node harness's GuestCluster, the guest kernel read through its agent), one API
    server."""

    host: Cluster
    guest: GuestCluster
    values: Path
    # The release installed at bring-up, when there is one before this checkout: the tier
    # upgrades from it (test_fleet_upgrade.py); else this checkout's chart from the start.
    previous: tuple[Release, Dist] | None = None
    egress: subprocess.Popen[bytes] | None = None
    down: bool = False
    cidrs: dict[str, str] = field(default_factory=dict)

    @property
    def nodes(self) -> tuple[str, str]:
        return (self.host.node, self.guest.node)

    def view(self, node: str) -> Cluster:
        """The harness that reads `node`'s kernel."""
        return self.host if node == self.host.node else self.guest

    def install(self, chart: Path | None = None, values: Path | None = None) -> None:
        """`helm upgrade --install` of `chart` (the host's, from dist/) with the chart's
        defaults, this cluster's paths and the operator's slow-node values file (`values`:
        the one of that chart's release)."""
        chart = chart or self.host.chart
        self.host.helm(
            "upgrade", "--install", RELEASE, str(chart), "-n", NAMESPACE,
            *self.host.chart_values(), "-f", str(values or self.values),
        )  # fmt: skip

    def driver_pods(self) -> dict[str, dict[str, Any]]:
        """The release's live pods by node name."""
        pods = self.host.get("pods", namespace=NAMESPACE)["items"]
        return {
            p["spec"]["nodeName"]: p
            for p in pods
            if p["metadata"].get("labels", {}).get("app.kubernetes.io/instance") == RELEASE
            and not p["metadata"].get("deletionTimestamp")
            and p["spec"].get("nodeName")
        }

    def ready_drivers(self) -> dict[str, dict[str, Any]]:
        """The release's pods that are Ready, by node name."""
        ready = {}
        for node, pod in self.driver_pods().items():
            conditions = pod.get("status", {}).get("conditions", [])
            if any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
                ready[node] = pod
        return ready

    def slices_of(self, node: str) -> list[dict[str, Any]]:
        return [s for s in self.host.slices() if s["spec"].get("nodeName") == node]

    def capacity_of(self, node: str) -> dict[str, int]:
        """What each device `node` publishes offers now."""
        return {
            d["name"]: int(d["capacity"]["dra.cpu/cpu"]["value"])
            for s in self.slices_of(node)
            for d in s["spec"].get("devices", [])
        }


def _host_cluster_sh(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(ROOT / "tools/cluster.sh"), *args],
        capture_output=True, text=True, timeout=budget(900), check=False,
    )  # fmt: skip


def bring_up(
    guest: Guest,
    images: str,
    dist: Dist,
    state: Path,
    setenv: Callable[[str, str], None],
    previous: tuple[Release, Dist] | None = None,
) -> Fleet:
    """The host's cluster up (its settings through `setenv`, for tools/cluster.sh and the
    harness), the guest booted and joined with the image disk's `images`, both Ready, the
    chart installed (the `previous` release's when given, its images on both nodes beside this
    checkout's; else this checkout's `dist`), a driver pod Ready on each node and slices from
    both; each step printed with its time. A bring-up that fails half-way takes down what it
    started."""
    config, socket_path = egress_config(state)
    for key, value in HOST_ENV.items():
        setenv(key, value)
    archives = [*dist.archives, *(previous[1].archives if previous else ())]
    setenv("DRACPU_CLUSTER_IMAGES", " ".join(str(a) for a in archives))
    setenv("DRACPU_CLUSTER_APISERVER_FLAGS", f"--egress-selector-config-file={config}")
    host_kubelet = f"{HOST_NODE_IP}:17250"
    fleet: Fleet | None = None
    egress = start_egress_proxy(guest, socket_path, f"{host_kubelet}={host_kubelet}")
    try:
        with step("fleet: control plane and the host's node on CRI-O (tools/cluster.sh up)"):
            done = _host_cluster_sh("up")
            if done.returncode != 0:
                raise AssertionError(f"tools/cluster.sh up failed: {done.stderr.strip()[-2000:]}")
        host = Cluster(chart=dist.chart)
        say(f"host node {host.node}: {host.runtime_version()}")
        fleet = Fleet(
            host=host,
            guest=GuestCluster(guest, CLUSTER_DIR / "controlplane"),
            values=slow_node_values(state / "slow-node.yaml"),
            previous=previous,
            egress=egress,
            cidrs={host.node: HOST_CIDR, GUEST_NODE: GUEST_CIDR},
        )
        _join_guest(fleet, images)
        installed = f"release {previous[0].tag}" if previous else f"this checkout ({dist.version})"
        with step(f"fleet: helm install of {installed} (defaults, the slow-node values file)"):
            if previous:
                # The operator of the previous release has that release's values file, read
                # from its own installation.md; the upgrade brings this checkout's.
                page = release_source(previous[0]) / "docs/user/installation.md"
                values = slow_node_values(state / f"slow-node-{previous[0].tag}.yaml", page)
                fleet.install(previous[1].chart, values)
            else:
                fleet.install()
        with step("fleet: a driver pod Ready on each node"):
            wait_for(
                lambda: set(fleet.ready_drivers()) == set(fleet.nodes) or None,
                "a Ready driver pod on each node",
                timeout=guest_cluster.DRIVER_TIMEOUT,
                interval=1.0,
            )
        with step("fleet: slices from both nodes"):
            wait_for(
                lambda: all(fleet.slices_of(n) for n in fleet.nodes) or None,
                "ResourceSlices of both nodes",
                timeout=budget(120),
                interval=0.5,
            )
    except BaseException:
        if fleet is None:
            _host_down(guest, egress)
        else:
            bring_down(fleet)
        raise
    return fleet


def _join_guest(fleet: Fleet, images: str) -> None:
    guest = fleet.guest.guest
    with step("fleet: guest booted"):
        guest.start()
    kubeconfig = guest.shared / "node.kubeconfig"
    node_kubeconfig(CLUSTER_DIR / "controlplane", kubeconfig, {})
    with step(f"fleet: {GUEST_NODE} joins (tools/cluster.sh node in the guest, containerd)"):
        started = guest.call(
            "cluster_node",
            kubeconfig=str(kubeconfig),
            images=images,
            node_name=GUEST_NODE,
            pod_cidr=GUEST_CIDR,
            service_upstream=APISERVER_ALIAS,
        )
    for line in started["log"]:
        say(f"  guest: {line}")

    def ready() -> bool:
        with contextlib.suppress(Exception):  # not registered yet
            node = fleet.host.get("node", GUEST_NODE, namespace="")
            conditions = {c["type"]: c["status"] for c in node["status"].get("conditions", [])}
            return conditions.get("Ready") == "True"
        return False

    with step(f"fleet: node {GUEST_NODE} Ready"):
        wait_for(ready, f"node {GUEST_NODE} Ready", timeout=budget(300), interval=0.5)


def bring_down(fleet: Fleet) -> None:
    """The guest's logs kept and the guest powered off, then the host's cluster down and the
    egress proxy stopped; each step runs whatever the one before raised."""
    if fleet.down:
        return
    fleet.down = True
    guest = fleet.guest.guest
    with contextlib.suppress(Exception):  # a hung guest fails this at once
        guest.call("cluster_logs", timeout=budget(300))
    _host_down(guest, fleet.egress)


def _host_down(guest: Guest, egress: subprocess.Popen[bytes] | None) -> None:
    try:
        with step("fleet: guest powered off"):
            guest.stop()
    finally:
        try:
            with step("fleet: host cluster down (tools/cluster.sh down)"):
                _host_cluster_sh("down")
        finally:
            if egress is not None:
                egress.terminate()
                try:
                    egress.wait(10)
                except subprocess.TimeoutExpired:
                    egress.kill()
                    egress.wait(10)


@contextmanager
def claimed_pods(fleet: Fleet, idle: dict[str, dict[str, int]]) -> Iterator[Fleet]:
    """Two claimed pods while the block runs: `pinned-host` with one CPU on the host (its node
    selected), `pinned-guest` with four, which only the guest's NUMA node 1 device offers (the
    scheduler's choice). Afterwards removed with their claims, and both nodes publishing what
    they did with nothing claimed."""
    host_spec = {"hostNetwork": False, "nodeSelector": {"kubernetes.io/hostname": fleet.host.node}}
    with step("fleet: a claimed pod on each node Running"):
        for name, count, spec in ((HOST_POD, 1, host_spec), (GUEST_POD, 4, {"hostNetwork": False})):
            fleet.host.apply(claim_manifest(name, [cpus_request(count)]))
            fleet.host.apply(pod_manifest(name, [("work", ["cpus"])], [("cpus", name)],
                                          extra_spec=spec))  # fmt: skip
        wait_for(
            lambda: all(fleet.host.running(p) for p in (HOST_POD, GUEST_POD)) or None,
            "both claimed pods Running",
            timeout=budget(POD_TIMEOUT),
            interval=1.0,
        )
    yield fleet
    with step("fleet: claimed pods removed"):
        for kind in ("pods", "resourceclaims"):
            fleet.host.kubectl("delete", kind, "--all", "-n", "default", "--wait=true",
                               "--timeout=300s", check=False)  # fmt: skip
        if not fleet.down:
            wait_for(
                lambda: all(fleet.capacity_of(n) == idle[n] for n in fleet.nodes) or None,
                "both nodes publishing what they did with nothing claimed",
                timeout=budget(120),
                interval=1.0,
            )
