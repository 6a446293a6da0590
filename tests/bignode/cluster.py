"""The one-node cluster whose node is the big-node guest: the control plane of
tools/controlplane.sh on the host's loopback, containerd + kubelet in the guest
(`tools/cluster.sh node`, through inguest.cluster_node), the chart installed from the host with
helm with its default values, the harness's paths and installation.md's slow-node values file.

The guest reaches the API server only at 10.96.0.1:443, which qemu relays to the host's
loopback (tests/harness/guest.py); its pods, the driver's among them, are on the guest's CNI
bridge, 10.244.0.0/24, and reach the API server at the same address, which the node relays to
qemu's second address of that forward (DRACPU_CLUSTER_SERVICE_UPSTREAM). The API server
reaches the kubelet (`kubectl logs`, `exec`, `port-forward`) at the node's address
10.96.0.15:17250 through its egress selector: every connection to the cluster is a CONNECT to a
proxy on a unix socket (tools/tcp-forward.py connect), which relays the kubelet's address, and
only that, to qemu's forward of it on the host's loopback.

`GuestCluster` is the e2e harness's `Cluster` with the kernel truth read in the guest: every
container's Cpus_allowed_list, cgroup v2 cpuset.cpus.effective and environment come from
inguest.cluster_containers (containerd's task folders and /proc in the guest)."""

from __future__ import annotations

import base64
import contextlib
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from harness.cluster import PROGRESS, ROOT, Cluster, say, step
from harness.guest import APISERVER_ALIAS, CACHE, KUBELET_ADDRESS, SERVICE_ADDRESS, Guest
from harness.speed import budget
from harness.waits import wait_for

from dracpu.core import children
from dracpu.core.cpuset import CPUSet

PROGRESS["tier"] = "bignode"
NODE_NAME = "dracpu-bignode"
GUEST_DIR = "/run/dracpu-node"  # inguest.CLUSTER_DIR
# The chart's allocator.stateDir, bound from the node's disk (tools/bignode/node.sh).
NODE_STATE_DIR = "/var/lib/dracpu"
KUBE_BIN = CACHE / "kubernetes-v1.37.2" / "bin"
HELM = ROOT / ".tools" / "bin" / "helm"
INSTALLATION = ROOT / "docs/user/installation.md"
# Under emulation a claimed pod takes 10-40 s from apply to Running, a driver pod minutes.
POD_TIMEOUT = 300.0
DRIVER_TIMEOUT = float(os.environ.get("DRACPU_BIGNODE_DRIVER_TIMEOUT", "900"))


def slow_node_values(target: Path, page: Path = INSTALLATION) -> Path:
    """The values file installation.md shows for a slow node (`# slow-node.yaml`: the probe
    timings of a node this slow, emulated and saturated by five Python services starting at
    once), written to `target` as an operator would save it: the page's block, word for word.
    `page` is another release's installation.md, for that release's chart (its values schema
    refuses keys it does not know)."""
    text = page.read_text(encoding="utf-8")
    found = re.search(r"```yaml\n(# slow-node\.yaml\n.*?)```", text, flags=re.DOTALL)
    assert found, f"{page} shows no slow-node.yaml block"
    target.write_text(found.group(1), encoding="utf-8")
    assert "probes" in yaml.safe_load(found.group(1)), found.group(1)
    return target


def prerequisites() -> str:
    """'' when the guest's cluster can run here, else one line saying what is missing."""
    needs = {
        "Kubernetes v1.37.2 (tools/build-kubernetes.sh)": (KUBE_BIN / "kube-apiserver").exists(),
        "helm (tools/install-helm.sh)": HELM.exists(),
    }
    absent = [name for name, found in needs.items() if not found]
    return f"the guest's cluster needs {', '.join(absent)}" if absent else ""


def image_disk(*more: Path) -> tuple[Path, str]:
    """The preloaded image disk (built when missing) and the driver images' archives it holds,
    separated by spaces (tools/tier-bignode.sh disk): this checkout's, and the `more` archives
    (an earlier release's images)."""
    done = subprocess.run(
        ["bash", str(ROOT / "tools/tier-bignode.sh"), "disk", *map(str, more)],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    lines = done.stdout.splitlines()
    if done.returncode != 0 or len(lines) != 2:
        tail = done.stderr.strip().splitlines()[-1:] or [f"exit {done.returncode}"]
        raise RuntimeError(f"tools/tier-bignode.sh disk: {tail[0]}")
    return Path(lines[0]), lines[1]


def egress_config(folder: Path) -> tuple[Path, Path]:
    """The API server's EgressSelectorConfiguration: the `cluster` traffic (to nodes, pods and
    services) as HTTP CONNECTs over a unix socket; the file and the socket it names."""
    socket_path = folder / "egress.sock"
    config = folder / "egress.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "apiserver.k8s.io/v1beta1",
                "kind": "EgressSelectorConfiguration",
                "egressSelections": [
                    {
                        "name": "cluster",
                        "connection": {
                            "proxyProtocol": "HTTPConnect",
                            "transport": {"uds": {"udsName": str(socket_path)}},
                        },
                    }
                ],
            }
        )
    )
    return config, socket_path


def start_egress_proxy(guest: Guest, socket_path: Path, *more: str) -> subprocess.Popen[bytes]:
    """tools/tcp-forward.py connect on `socket_path`: the kubelet's address to its forward on
    the host's loopback, and the `more` mappings (`HOST:PORT=TARGET`: other nodes' kubelets);
    dies with this process. Returned once it listens."""
    log = (guest.state / "egress-proxy.log").open("ab")
    proxy = subprocess.Popen(
        children.tied_to_parent(
            [
                sys.executable,
                str(ROOT / "tools/tcp-forward.py"),
                "connect",
                str(socket_path),
                f"{KUBELET_ADDRESS}=127.0.0.1:{guest.kubelet_port}",
                *more,
            ],
            signal.SIGKILL,
        ),
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    log.close()

    def listening() -> bool:
        if proxy.poll() is not None:
            raise RuntimeError(f"the egress proxy exited with {proxy.returncode}")
        return socket_path.is_socket()

    wait_for(listening, f"the egress proxy on {socket_path}", timeout=60, interval=0.1)
    return proxy


def _controlplane(
    *args: str, env: dict[str, str] | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """tools/controlplane.sh; with `check`, a failure is a RuntimeError with its stderr."""
    done = subprocess.run(
        ["bash", str(ROOT / "tools/controlplane.sh"), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
        check=False,
    )
    if check and done.returncode != 0:
        raise RuntimeError(f"tools/controlplane.sh {args[0]}: {done.stderr.strip()[-1500:]}")
    return done


def _inline(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def node_kubeconfig(cp_dir: Path, target: Path, env: dict[str, str]) -> None:
    """The kubelet's credentials (system:node:<name>, group system:nodes: the Node authorizer
    and NodeRestriction apply) as a kubeconfig with everything inline, naming the API server
    by the address the guest reaches it at (in the certificate's SANs)."""
    name = "node"
    _controlplane("client", str(cp_dir), name, f"system:node:{NODE_NAME}", "system:nodes", env=env)
    pki = cp_dir / "pki"
    config: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "bignode",
                "cluster": {
                    "server": f"https://{SERVICE_ADDRESS}",
                    "certificate-authority-data": _inline(pki / "ca.crt"),
                },
            }
        ],
        "users": [
            {
                "name": name,
                "user": {
                    "client-certificate-data": _inline(pki / f"{name}.crt"),
                    "client-key-data": _inline(pki / f"{name}.key"),
                },
            }
        ],
        "contexts": [{"name": "bignode", "context": {"cluster": "bignode", "user": name}}],
        "current-context": "bignode",
    }
    target.write_text(yaml.safe_dump(config))
    target.chmod(0o600)


class GuestCluster(Cluster):
    """The e2e harness on the guest's cluster; see the module docstring."""

    def __init__(self, guest: Guest, cp_dir: Path) -> None:
        super().__init__(
            {
                "KUBECONFIG": str(cp_dir / "admin.kubeconfig"),
                "KUBECTL": str(KUBE_BIN / "kubectl"),
                "CRICTL": "crictl",  # in the guest only: see cluster_containers
                "CLUSTER_DIR": GUEST_DIR,
                "NODE_NAME": NODE_NAME,
                "KUBELET_ROOT": f"{GUEST_DIR}/kubelet",
                "NRI_SOCKET": "/var/run/nri/nri.sock",
            }
        )
        self.guest = guest
        self.state_dir = Path(NODE_STATE_DIR)  # not the harness's folder on the guest's tmpfs
        self._online: CPUSet | None = None
        self._views: dict[str, dict[str, Any]] | None = None
        self.down = False  # bring_down ran
        self.egress_proxy: subprocess.Popen[bytes] | None = None

    def chart_values(self, *extra: str) -> list[str]:
        """The chart's defaults with this node's paths (the harness's), and the operator's
        slow-node values file."""
        values = slow_node_values(self.guest.state / "slow-node.yaml")
        return [*super().chart_values(*extra), "-f", str(values)]

    def kubectl(
        self, *args: str, stdin: str | None = None, check: bool = True, timeout: float = 300.0
    ) -> str:
        if args[:1] != ("get",):
            self._views = None  # the containers may change: read them afresh
        return super().kubectl(*args, stdin=stdin, check=check, timeout=timeout)

    def container(self, pod: str, container: str, namespace: str) -> dict[str, Any]:
        """The guest's view of one running container. One snapshot of all of them serves the
        checks until the next change made through kubectl (each costs two crictl runs in the
        guest); a container missing from it is looked for once more in a fresh one."""
        key = f"{namespace}/{pod}/{container}"
        for fresh in (self._views is None, True):
            if fresh:
                self._views = self.guest.call("cluster_containers")
            assert self._views is not None
            if key in self._views:
                return self._views[key]
        raise AssertionError(f"no running container {key} in the guest: {sorted(self._views)}")

    def refresh(self) -> None:
        """The next container read takes a fresh snapshot (for waits on a change the test did
        not make through kubectl: an eviction, the driver moving a container)."""
        self._views = None

    def api(self, path: str) -> Any:
        """GET `path` of the driver's api on its pod's IP, asked in the guest (the pod network
        has no route out of it)."""
        pod = self.driver_pod()
        address = (pod or {}).get("status", {}).get("podIP")
        if not address:
            raise AssertionError(f"no driver pod with an IP to ask for {path}")
        return self.guest.call("driver_api", address=address, port=self.api_port, path=path)

    def online(self) -> CPUSet:
        if self._online is None:
            self._online = CPUSet.parse(self.guest.call("kernel")["online"])
        return self._online

    def container_pid(self, pod: str, container: str, namespace: str = "default") -> int:
        return int(self.container(pod, container, namespace)["pid"])

    def cpus_of(self, pod: str, container: str, namespace: str = "default") -> CPUSet:
        """Cpus_allowed_list of the container's process; checked equal to its cgroup v2
        cpuset.cpus.effective (the two views of the guest kernel agree)."""
        seen = self.container(pod, container, namespace)
        assert seen["cpus_allowed"] == seen["cpus_effective"], seen
        return CPUSet.parse(seen["cpus_allowed"])

    def cgroup_cpuset_of(self, pod: str, container: str, namespace: str = "default") -> CPUSet:
        return CPUSet.parse(self.container(pod, container, namespace)["cpus_effective"])

    def env_of(self, pod: str, container: str, namespace: str = "default") -> dict[str, str]:
        return dict(self.container(pod, container, namespace)["env"])


def published_capacity(cluster: GuestCluster) -> dict[str, int]:
    """The CPUs each published device offers now."""
    return {
        name: int(device["capacity"]["dra.cpu/cpu"]["value"])
        for name, device in cluster.published().items()
    }


def clear(cluster: GuestCluster, idle: dict[str, int]) -> None:
    """No pods or claims left in the default namespace, and the node publishing `idle` again
    (the driver released their claims: under emulation that comes a while after the API
    objects are gone)."""
    cluster.guest.check()  # a hung node answers no delete: fail now, not after the timeouts
    # Under emulation a loaded machine takes minutes to stop a pod's containers: the wait is
    # the machine's, scaled from its speed.
    wait = budget(POD_TIMEOUT)
    for kind in ("pods", "resourceclaims"):
        cluster.kubectl(
            "delete",
            kind,
            "--all",
            "-n",
            "default",
            "--wait=true",
            f"--timeout={wait:.0f}s",
            timeout=wait + 60,
        )
    wait_for(
        lambda: _published_idle(cluster, idle),
        f"the node to publish {idle} again (the earlier test's claims released)",
        timeout=POD_TIMEOUT,
        interval=1.0,
    )


def _published_idle(cluster: GuestCluster, idle: dict[str, int]) -> bool:
    published = published_capacity(cluster)
    assert published == idle, f"published {published}"
    return True


def bring_up(guest: Guest, images: str) -> GuestCluster:
    """Control plane on the host, node in the guest, node Ready, chart installed and its pod
    Ready, slices published; each step printed with its time."""
    cp_dir = guest.state / "controlplane"
    env = {
        "DRACPU_CP_APISERVER_PORT": str(guest.apiserver_port),
        "DRACPU_CP_ETCD_PORT": str(guest.apiserver_port - 64),
        "DRACPU_CP_ETCD_PEER_PORT": str(guest.apiserver_port - 63),
        "DRACPU_CP_SCHEDULER_PORT": str(guest.apiserver_port + 16),
        "DRACPU_CP_CONTROLLER_MANAGER_PORT": str(guest.apiserver_port + 14),
    }
    cluster = GuestCluster(guest, cp_dir)
    try:
        config, socket_path = egress_config(guest.state)
        cluster.egress_proxy = start_egress_proxy(guest, socket_path)
        with step("cluster: control plane up on the host's loopback"):
            _controlplane(
                "up",
                str(cp_dir),
                f"--egress-selector-config-file={config}",
                "--kubelet-preferred-address-types=InternalIP",
                env=env,
            )
        _bring_up_node(cluster, guest, cp_dir, env, images)
    except BaseException:
        # A failed bring-up (a timeout included) leaves no control plane or guest behind.
        bring_down(cluster)
        raise
    return cluster


def _bring_up_node(
    cluster: GuestCluster, guest: Guest, cp_dir: Path, env: dict[str, str], images: str
) -> None:
    kubeconfig = guest.shared / "node.kubeconfig"
    node_kubeconfig(cp_dir, kubeconfig, env)
    with step("cluster: containerd + kubelet in the guest (bed stopped)"):
        started = guest.call(
            "cluster_node",
            kubeconfig=str(kubeconfig),
            images=images,
            node_name=NODE_NAME,
            service_upstream=APISERVER_ALIAS,  # the driver's pod reaches the API server
        )
    for line in started["log"]:
        say(f"  guest: {line}")

    def ready() -> bool:
        try:
            node = cluster.get("node", NODE_NAME, namespace="")
        except Exception:  # not registered yet
            return False
        conditions = {c["type"]: c["status"] for c in node["status"].get("conditions", [])}
        return conditions.get("Ready") == "True"

    with step(f"cluster: node {NODE_NAME} Ready"):
        wait_for(ready, f"node {NODE_NAME} Ready", timeout=300, interval=0.3)
    with step("cluster: helm install (slow-node probe timings)"):
        cluster.install()
    with step("cluster: driver pod Ready"):
        wait_for(cluster.driver_ready, "driver pod Ready", timeout=DRIVER_TIMEOUT, interval=0.3)
    wait_for(lambda: cluster.published(), "ResourceSlices published", timeout=120, interval=0.3)


def bring_down(cluster: GuestCluster) -> None:
    """The node's and the containers' logs kept in the state folder, the guest powered off
    (the cluster is the last thing it runs), then the control plane stopped: with the guest's
    connections still open the API server takes its whole grace period to stop. Each step runs
    whatever the one before it raised (an interrupt included): nothing is left running."""
    if cluster.down:
        return
    cluster.down = True
    try:
        with contextlib.suppress(Exception):  # a hung guest fails this at once
            cluster.guest.call("cluster_logs", timeout=budget(300))
    finally:
        try:
            with step("cluster: guest powered off"):
                cluster.guest.stop()
        finally:
            _control_plane_down(cluster)


def _control_plane_down(cluster: GuestCluster) -> None:
    try:
        cp_dir = Path(cluster.kubeconfig).parent
        with step("cluster: control plane down"):
            stopped = _controlplane("down", str(cp_dir), check=False)
        for line in stopped.stderr.strip().splitlines():
            say(f"  {line}")
    finally:
        if cluster.egress_proxy is not None:
            cluster.egress_proxy.terminate()
            try:
                cluster.egress_proxy.wait(10)
            except subprocess.TimeoutExpired:
                cluster.egress_proxy.kill()
                cluster.egress_proxy.wait(10)
