"""The one-node cluster of tools/cluster.sh, driven the way a user would: kubectl, helm and
crictl as processes. Pinning is read from the kernel (/proc/<pid>/status of the container's
process, found through the runtime), never from the driver's own view."""

from __future__ import annotations

import json
import os
import re
import select
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dracpu.core.cpuset import CPUSet
from dracpu.core.errors import NotFoundError
from harness.cgroups import Cgroups
from harness.control_plane import CommandError

ROOT = Path(__file__).resolve().parents[2]

RELEASE = "dra-driver-cpu"
NAMESPACE = "kube-system"
SERVICES = ("topology", "allocator", "dra-plugin", "nri-plugin", "api")
TEST_IMAGE = "localhost/dracpu-realnode:1"  # busybox + pause, imported by tools/cluster.sh
# A container that sleeps and ends at once on SIGTERM (a bare `sleep` as PID 1 ignores it).
SLEEP = ["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"]
# Graceful deletion: the API server keeps a deleted pod until its kubelet has stopped it and
# unprepared its claims (kubelet.go syncTerminatedPod, then the status manager's final delete).
# With 0 the pod is removed at once, its claims are deallocated while still prepared, and the
# next claim's NodePrepareResources finds their CPUs still taken.
GRACE_SECONDS = 1
_START = time.monotonic()


PROGRESS = {"tier": "e2e"}  # the tier named in progress lines (the big-node tier sets its own)


def say(message: str) -> None:
    """One progress line on the real stdout (pytest captures the test's own)."""
    tier = PROGRESS["tier"]
    sys.__stdout__.write(f"{tier}: [{time.monotonic() - _START:6.1f}s] {message}\n")
    sys.__stdout__.flush()


@contextmanager
def step(name: str) -> Iterator[None]:
    started = time.monotonic()
    yield
    say(f"{name} ({time.monotonic() - started:.1f} s)")


def run(
    argv: Sequence[str], *, stdin: str | None = None, check: bool = True, timeout: float = 300.0
) -> str:
    done = subprocess.run(
        list(argv), input=stdin, capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and done.returncode != 0:
        raise CommandError(f"{shlex.join(argv)}: exit {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def cluster_env() -> dict[str, str]:
    """The settings `tools/cluster.sh env` prints."""
    env: dict[str, str] = {}
    for line in run(["bash", str(ROOT / "tools/cluster.sh"), "env"]).splitlines():
        key, _, value = line.removeprefix("export ").partition("=")
        env[key] = value.strip('"')
    return env


class Cluster:
    """Settings from `tools/cluster.sh env` (or given: `env`), plus the commands the scenarios
    use. The kernel truth (`online`, `cpus_of`, `cgroup_cpuset_of`, `env_of`) is read on this
    machine; a node elsewhere (the big-node guest) reads it there."""

    def __init__(self, env: dict[str, str] | None = None, chart: Path | None = None) -> None:
        env = cluster_env() if env is None else env
        # What `install` installs: the checkout's chart folder, or a packaged chart (.tgz).
        self.chart = ROOT / "helm/dra-driver-cpu" if chart is None else chart
        self.env = env
        self.kubeconfig = env["KUBECONFIG"]
        self.kubectl_bin = env["KUBECTL"]
        self.crictl_argv = shlex.split(env["CRICTL"])
        self.dir = Path(env["CLUSTER_DIR"])
        self.node = env["NODE_NAME"]
        self.kubelet_root = env["KUBELET_ROOT"]
        self.nri_socket = env["NRI_SOCKET"]
        self.runtime = env.get("RUNTIME", "containerd")  # DRACPU_RUNTIME of tools/cluster.sh
        self.state_dir = self.dir / "dracpu-state"
        self.api_port = 8080  # the chart's default (healthzPort), on the pod's own IP
        self.helm_bin = str(ROOT / ".tools/bin/helm")
        chart = (ROOT / "helm/dra-driver-cpu/Chart.yaml").read_text()
        found = re.search(r'^appVersion: "([^"]+)"', chart, flags=re.MULTILINE)
        assert found, "helm/dra-driver-cpu/Chart.yaml has no quoted appVersion"
        self.app_version = found.group(1)  # the images' tag
        self.kubelet_log = self.dir / "logs/kubelet.log"
        # A kubelet left running by an earlier run keeps its log: read only what this run adds.
        log = self.kubelet_log
        self._kubelet_log_start = log.stat().st_size if log.exists() else 0

    def kubelet_log_of_this_run(self) -> str:
        """The kubelet's log lines written since this run began."""
        with self.kubelet_log.open("rb") as log:
            size = log.seek(0, os.SEEK_END)
            log.seek(self._kubelet_log_start if size >= self._kubelet_log_start else 0)
            return log.read().decode("utf-8", "replace")

    # ---- tools --------------------------------------------------------------------------------

    def kubectl(
        self, *args: str, stdin: str | None = None, check: bool = True, timeout: float = 300.0
    ) -> str:
        return run(
            [self.kubectl_bin, "--kubeconfig", self.kubeconfig, *args],
            stdin=stdin,
            check=check,
            timeout=timeout,
        )

    @contextmanager
    def port_forward(
        self, target: str, port: int, namespace: str = "default", timeout: float = 120.0
    ) -> Iterator[int]:
        """`kubectl port-forward TARGET :PORT` (the API server, then the node's kubelet, into
        the pod's network namespace): the local port it forwards from, until the block ends.
        Waits for its `Forwarding from 127.0.0.1:N` line; a kubectl that ends first fails
        with its own words."""
        process = subprocess.Popen(
            [self.kubectl_bin, "--kubeconfig", self.kubeconfig, "port-forward", "-n", namespace,
             "--address", "127.0.0.1", target, f":{port}"],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert process.stdout is not None
            ready, _, _ = select.select([process.stdout], [], [], timeout)
            line = process.stdout.readline() if ready else ""
            found = re.match(r"Forwarding from 127\.0\.0\.1:(\d+) -> ", line)
            if found is None:
                process.kill()
                _, errors = process.communicate(timeout=30)
                raise CommandError(
                    f"kubectl port-forward {target} :{port}: no forward in {timeout:.0f} s "
                    f"(printed {line.strip()!r}): {errors.strip()}"
                )
            yield int(found.group(1))
        finally:
            process.terminate()
            try:
                process.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.communicate(timeout=30)

    def get(self, kind: str, name: str = "", namespace: str = "default") -> Any:
        args = ["get", kind, *([name] if name else []), "-o", "json"]
        if namespace:
            args += ["-n", namespace]
        return json.loads(self.kubectl(*args))

    def apply(self, manifest: str, namespace: str = "default") -> None:
        self.kubectl("apply", "-n", namespace, "-f", "-", stdin=manifest)

    def delete(self, kind: str, *names: str, namespace: str = "default") -> None:
        self.kubectl(
            "delete",
            kind,
            *names,
            "-n",
            namespace,
            "--ignore-not-found",
            "--wait=true",
            "--timeout=120s",
        )

    def helm(self, *args: str) -> str:
        return run([self.helm_bin, "--kubeconfig", self.kubeconfig, *args])

    def crictl(self, *args: str) -> str:
        return run([*self.crictl_argv, *args])

    def runtime_version(self) -> str:
        """The node's runtime as its CRI Version call names it, e.g. `cri-o 1.34.0`."""
        fields = dict(
            line.split(":", 1) for line in self.crictl("version").splitlines() if ":" in line
        )
        return f"{fields['RuntimeName'].strip()} {fields['RuntimeVersion'].strip()}"

    def tag_image(self, image: str, new: str) -> None:
        """The node's image `image` also called `new`: `ctr images tag` on containerd; CRI-O,
        which takes images only by pulling, pulls `new` from a registry serving the image's
        archive (`tools/cluster.sh tag`)."""
        if self.runtime == "containerd":
            self.ctr("images", "tag", "--force", image, new)
        else:
            run(["bash", str(ROOT / "tools/cluster.sh"), "tag", image, new])

    def ctr(self, *args: str) -> str:
        return run(
            [self.env["CTR"], "--address", self.env["CONTAINERD_SOCKET"], "-n", "k8s.io", *args]
        )

    def chart_values(self, *extra: str) -> list[str]:
        """The chart's settings for this node: the kubelet root, NRI socket and state dir of
        this cluster, the images imported into the runtime and never pulled. Nothing else: the
        driver runs with the chart's defaults, on the pod network (tools/cluster.sh)."""
        values = [
            "imagePullPolicy=Never",
            f"kubeletRootDir={self.kubelet_root}",
            f"nriPlugin.nriSocket={self.nri_socket}",
            f"allocator.stateDir={self.state_dir}",
            *extra,
        ]
        return [arg for value in values for arg in ("--set", value)]

    def install(self, *extra: str) -> None:
        self.helm(
            "upgrade",
            "--install",
            RELEASE,
            str(self.chart),
            "-n",
            NAMESPACE,
            *self.chart_values(*extra),
        )

    # ---- the driver pod ---------------------------------------------------------------------

    def driver_pod(self) -> dict[str, Any] | None:
        pods = self.get("pods", namespace=NAMESPACE)["items"]
        mine = [
            p
            for p in pods
            if p["metadata"].get("labels", {}).get("app.kubernetes.io/instance") == RELEASE
            and not p["metadata"].get("deletionTimestamp")
        ]
        return mine[0] if mine else None

    def driver_ready(self) -> dict[str, Any] | None:
        pod = self.driver_pod()
        if pod is None:
            return None
        conditions = {c["type"]: c["status"] for c in pod.get("status", {}).get("conditions", [])}
        return pod if conditions.get("Ready") == "True" else None

    def slices(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.get("resourceslices", namespace="")["items"]
        return [s for s in items if s["spec"].get("driver") == "dra.cpu"]

    def published(self) -> dict[str, dict[str, Any]]:
        return {d["name"]: d for s in self.slices() for d in s["spec"].get("devices", [])}

    # ---- kernel truth -----------------------------------------------------------------------

    def online(self) -> CPUSet:
        """The node's online CPUs."""
        return CPUSet.parse(Path("/sys/devices/system/cpu/online").read_text().strip())

    def container_pid(self, pod: str, container: str, namespace: str = "default") -> int:
        pods = self.crictl(
            "pods", "--name", pod, "--namespace", namespace, "--state", "ready", "-q"
        )
        ids = self.crictl(
            "ps", "--name", f"^{container}$", "--pod", pods.split()[0], "--state", "running", "-q"
        ).split()
        info = json.loads(self.crictl("inspect", ids[0]))
        return int(info["info"]["pid"])

    def cpus_of(self, pod: str, container: str, namespace: str = "default") -> CPUSet:
        pid = self.container_pid(pod, container, namespace)
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Cpus_allowed_list:"):
                return CPUSet.parse(line.split(":", 1)[1].strip())
        raise AssertionError(f"/proc/{pid}/status has no Cpus_allowed_list")

    def cgroup_cpuset_of(self, pod: str, container: str, namespace: str = "default") -> CPUSet:
        """The CPUs of the container's cgroup: cpuset.cpus of the cpuset hierarchy on cgroup
        v1, cpuset.cpus.effective of the unified one on v2."""
        pid = self.container_pid(pod, container, namespace)
        try:
            return CPUSet.parse(Cgroups().cpus(pid))
        except NotFoundError as exc:
            raise AssertionError(str(exc)) from None

    def env_of(self, pod: str, container: str, namespace: str = "default") -> dict[str, str]:
        pid = self.container_pid(pod, container, namespace)
        raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        return dict(e.decode().partition("=")[::2] for e in raw if b"=" in e)

    def running(self, pod: str, namespace: str = "default") -> dict[str, Any] | None:
        try:
            found = self.get("pod", pod, namespace)
        except CommandError:
            return None  # not created yet, or deleted
        return found if found.get("status", {}).get("phase") == "Running" else None

    def events_of(self, pod: str, namespace: str = "default") -> list[dict[str, Any]]:
        """Events of the pod now called `pod` (not of an earlier pod of the same name)."""
        try:
            uid = self.get("pod", pod, namespace)["metadata"]["uid"]
        except CommandError:
            return []
        events: list[dict[str, Any]] = self.get("events", namespace=namespace)["items"]
        return [e for e in events if e["involvedObject"].get("uid") == uid]

    def scheduling_failure(self, pod: str, namespace: str = "default") -> str | None:
        """The scheduler's latest FailedScheduling message for the pod, if any."""
        failed = [
            e for e in self.events_of(pod, namespace) if e.get("reason") == "FailedScheduling"
        ]
        if not failed:
            return None
        latest = max(failed, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
        return str(latest.get("message", ""))

    def cpu_allocatable_millis(self) -> int:
        return cpu_millis(self.get("node", self.node, namespace="")["status"]["allocatable"]["cpu"])

    def cpu_requested_millis(self) -> int:
        """The cpu the pods bound to the node request (containers only; no pod here has
        init containers that ask for more)."""
        total = 0
        for pod in json.loads(self.kubectl("get", "pods", "--all-namespaces", "-o", "json"))[
            "items"
        ]:
            if pod["spec"].get("nodeName") != self.node:
                continue
            if pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
                continue
            for container in pod["spec"]["containers"]:
                requests = container.get("resources", {}).get("requests", {})
                total += cpu_millis(requests.get("cpu", "0"))
        return total

    def prepare_failure(self, pod: str, namespace: str = "default") -> str | None:
        """The kubelet's FailedPrepareDynamicResources message for the pod, if any."""
        for event in self.events_of(pod, namespace):
            if event.get("reason") == "FailedPrepareDynamicResources":
                return str(event.get("message", ""))
        return None


def pod_manifest(
    name: str,
    containers: Sequence[tuple[str, Sequence[str]]],
    claims: Sequence[tuple[str, str]] = (),
    *,
    template: bool = False,
    extra_spec: dict[str, Any] | None = None,
) -> str:
    """A host-network busybox pod; `containers` is (name, claim names it uses); `claims` is
    (claim name in the pod, ResourceClaim or ResourceClaimTemplate name)."""
    key = "resourceClaimTemplateName" if template else "resourceClaimName"
    spec: dict[str, Any] = {
        "hostNetwork": True,
        "terminationGracePeriodSeconds": GRACE_SECONDS,
        "tolerations": [{"operator": "Exists"}],
        "resourceClaims": [{"name": n, key: ref} for n, ref in claims],
        "containers": [
            {
                "name": c,
                "image": TEST_IMAGE,
                "imagePullPolicy": "Never",
                "command": SLEEP,
                "resources": {"claims": [{"name": u} for u in uses]},
            }
            for c, uses in containers
        ],
    }
    spec.update(extra_spec or {})
    return json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec})


def claim_manifest(name: str, requests: Sequence[dict[str, Any]], **spec: Any) -> str:
    devices: dict[str, Any] = {"requests": list(requests), **spec}
    return json.dumps(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name},
            "spec": {"devices": devices},
        }
    )


def cpus_request(count: int, name: str = "cpus") -> dict[str, Any]:
    return {
        "name": name,
        "exactly": {
            "deviceClassName": "dra.cpu",
            "capacity": {"requests": {"dra.cpu/cpu": str(count)}},
        },
    }


def cpu_millis(quantity: str) -> int:
    """A cpu quantity (`2`, `1500m`, `0.5`) in millicores."""
    if quantity.endswith("m"):
        return int(quantity[:-1])
    return round(float(quantity) * 1000)


def claim_cpus(env: dict[str, str]) -> CPUSet:
    values = [v for k, v in env.items() if k.startswith("DRA_CPUSET_")]
    assert len(values) == 1, env
    return CPUSet.parse(values[0])
