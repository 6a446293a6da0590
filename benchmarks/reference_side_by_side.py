"""The reference driver and this one side by side on the one-node cluster, on the same kubelet.

The reference (the Go driver this project re-implements) is built from its source tree
(--reference-src, a git checkout): `go build` of ./cmd/dracpu, static (CGO off) as its
Dockerfile builds it, its modules through the Go module proxy, cached in
$DRACPU_CACHE/reference-<commit>. Its image is the binary on the project's debootstrapped base
(`tools/tier-docker.sh base-archive`), written as an image archive without an engine and
imported into the node's containerd. Each driver is installed with its own chart; for the
reference only what this machine needs is set (image, pullPolicy Never, the kubelet's root,
a free health port) and grouping by NUMA node, as ours groups by default.

The cluster (tools/cluster.sh) is brought up fresh with the API server's audit log on (the
drivers' service accounts at Metadata level), and down again at the end. Then, per round
(reference first, ours second), each driver in turn: installed alone (the other uninstalled,
its slices gone), N claimed pods of 1 CPU created and deleted one after another, then idle.

Every figure comes from the kubelet, the kernel or the API server, never from a driver:

  idle_cpu_millicores    the driver pod's cpu.usageCoreNanoSeconds on the kubelet's summary
                         API (/stats/summary), its delta over the idle window divided by the
                         delta of the samples' own timestamps (the exact mean of usageNanoCores)
  rss_mib, working_set_mib
                         the pod's memory.rssBytes and workingSetBytes on the same API, the
                         median of the idle window's samples
  prepare_mean_ms, prepare_p99_ms, unprepare_mean_ms
                         the kubelet's dra_grpc_operations_duration_seconds histogram (its
                         /metrics), by method: the mean is the delta of its sum over the delta
                         of its count across the churn; the p99 is of each call's own duration,
                         the sum's move across that one call (the histogram is read after each
                         prepare and each unprepare: its buckets begin at 100 ms, coarser than
                         the calls)
  create_to_running_median_s, create_to_running_p99_s
                         from just before the pod's create request to the watch event that
                         shows it Running (a watch from the create's resourceVersion)
  api_requests_per_claim the API server's audit events of the driver's service account
                         received during the churn, per claim
  slice_writes           audit events of create/update/patch/delete on resourceslices by the
                         driver's service account from install to the end of its idle window
                         (dry-run requests counted apart)
  install_to_ready_s     `helm install` to the driver pod's Ready condition, as watched

Prints one line per figure, `side-by-side: <figure> ours=<x> reference=<y> ratio=<r>` (the
median over the rounds; ratio is ours over the reference's), and with --json every sample.

Needs root and the e2e tier's pieces (tools/tier-e2e.sh bootstrap); run it under the peers'
lock, e.g. `flock /tmp/dracpu-peers.lock .venv/bin/python benchmarks/reference_side_by_side.py
--reference-src DIR`. --build-only builds the binary and the image archive and stops (no
cluster, no lock needed).

Usage: python benchmarks/reference_side_by_side.py --reference-src DIR [--pods N] [--idle S]
           [--rounds N] [--sample-every S] [--json FILE] [--build-only] [--keep]
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

from harness.cluster import NAMESPACE, RELEASE, ROOT, Cluster, claim_manifest, cpus_request
from harness.cluster import pod_manifest as cluster_pod_manifest
from harness.control_plane import CommandError
from harness.waits import wait_for
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException
from prometheus_client.parser import text_string_to_metric_families

MIB = 1024 * 1024
REFERENCE_RELEASE = "dra-driver-cpu-reference"  # also its ServiceAccount (the chart's fullname)
REFERENCE_IMAGE = "localhost/dra-driver-cpu-reference"
REFERENCE_HEALTH_PORT = 17088  # the chart's 8080 is a common port on a shared host
DRIVER = "dra.cpu"
BENCH_LABEL = "dracpu-side-by-side"
AUDIT_POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
- level: Metadata
  users: [{users}]
- level: None
"""
PREPARE, UNPREPARE = "NodePrepareResources", "NodeUnprepareResources"
WRITES = ("create", "update", "patch", "delete")
FIGURES = (
    "idle_cpu_millicores",
    "rss_mib",
    "working_set_mib",
    "prepare_mean_ms",
    "prepare_p99_ms",
    "unprepare_mean_ms",
    "create_to_running_median_s",
    "create_to_running_p99_s",
    "api_requests_per_claim",
    "slice_writes",
    "install_to_ready_s",
)


def say(message: str) -> None:
    print(f"side-by-side: # {message}", file=sys.stderr, flush=True)


def fail(message: str) -> SystemExit:
    return SystemExit(f"reference_side_by_side: {message}")


def run(argv: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
        raise fail(f"{' '.join(argv[:3])}: exit {done.returncode}: {' / '.join(tail)}")
    return done.stdout


def cache_root() -> Path:
    return Path(os.environ.get("DRACPU_CACHE", Path.home() / ".cache/dracpu"))


# ---- the reference: binary and image --------------------------------------------------------


def reference_commit(src: Path) -> str:
    if not (src / "go.mod").is_file() or "dra-driver-cpu" not in (src / "go.mod").read_text():
        raise fail(f"{src} is not a checkout of the reference (no go.mod of dra-driver-cpu)")
    done = subprocess.run(
        ["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise fail(f"{src} is not a git checkout: its commit keys the cache (git clone it)")
    return done.stdout.strip()


def build_binary(src: Path, commit: str) -> Path:
    """The reference's driver binary as its Dockerfile builds it (static, stripped), once per
    commit."""
    folder = cache_root() / f"reference-{commit}"
    binary = folder / "dracpu"
    if (folder / ".complete").exists():
        return binary
    if shutil.which("go") is None:
        raise fail("go not found: the reference is built from its source")
    folder.mkdir(parents=True, exist_ok=True)
    say(f"building the reference's driver at {commit[:12]} (go build ./cmd/dracpu)")
    started = time.monotonic()
    env = {**os.environ, "CGO_ENABLED": "0"}
    run(
        ["go", "build", "-trimpath", "-ldflags", "-s -w", "-o", str(binary), "./cmd/dracpu"],
        cwd=src,
        env=env,
    )
    (folder / ".complete").touch()
    say(f"built in {time.monotonic() - started:.0f} s ({binary.stat().st_size / MIB:.1f} MiB)")
    return binary


def base_archive() -> Path:
    path = Path(run(["bash", str(ROOT / "tools/tier-docker.sh"), "base-archive"]).strip())
    if not (path.parent / ".complete").exists():
        raise fail(f"no base image archive at {path} (tools/tier-docker.sh bootstrap)")
    return path


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(partial(f.read, 1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def binary_layer(binary: Path) -> bytes:
    """A layer holding the binary at /dracpu and /dracpu-gatherinfo, as the Dockerfile copies
    it (root-owned, executable)."""
    out = io.BytesIO()
    data = binary.read_bytes()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in ("dracpu", "dracpu-gatherinfo"):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o755, 0
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def build_image(binary: Path, commit: str) -> tuple[Path, str]:
    """A docker-save archive of the image (the base's rootfs, then the binary), written once
    per commit and base; returns it and the image's name."""
    base = base_archive()
    name = f"{REFERENCE_IMAGE}:{commit[:12]}"
    key = hashlib.sha256(f"{base} {base.stat().st_mtime_ns} {name}".encode()).hexdigest()[:12]
    archive = binary.parent / f"image-{key}.tar"
    if archive.exists():
        return archive, name
    say(f"writing the image {name} on {base.parent.name}")
    top = binary_layer(binary)
    layers = [(sha256_of(base), base, None), (hashlib.sha256(top).hexdigest(), None, top)]
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Cmd": ["/dracpu"], "Env": ["PATH=/usr/sbin:/usr/bin:/sbin:/bin"]},
            "rootfs": {"type": "layers", "diff_ids": [f"sha256:{d}" for d, _, _ in layers]},
        }
    ).encode()
    config_name = f"{hashlib.sha256(config).hexdigest()}.json"
    manifest = [
        {
            "Config": config_name,
            "RepoTags": [name],
            "Layers": [f"{d}/layer.tar" for d, _, _ in layers],
        }
    ]
    partial_archive = archive.with_suffix(".partial")
    with tarfile.open(partial_archive, "w") as tar:
        for digest, path, data in layers:
            if path is not None:
                tar.add(path, arcname=f"{digest}/layer.tar")
            else:
                assert data is not None
                info = tarfile.TarInfo(f"{digest}/layer.tar")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        index = json.dumps(manifest).encode()
        for member, data in ((config_name, config), ("manifest.json", index)):
            info = tarfile.TarInfo(member)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    partial_archive.rename(archive)
    return archive, name


# ---- what the kubelet and the API server report ---------------------------------------------


@dataclass
class Histogram:
    """One method's dra_grpc_operations_duration_seconds, summed over status codes."""

    count: float = 0.0
    total: float = 0.0
    buckets: dict[float, float] = field(default_factory=dict)

    def minus(self, earlier: Histogram) -> Histogram:
        return Histogram(
            self.count - earlier.count,
            self.total - earlier.total,
            {le: n - earlier.buckets.get(le, 0.0) for le, n in self.buckets.items()},
        )

    def mean_ms(self) -> float:
        return 1000 * self.total / self.count if self.count else float("nan")

    def quantile_ms(self, q: float) -> float:
        """The q-quantile, linear within its bucket (as Prometheus' histogram_quantile)."""
        if not self.count:
            return float("nan")
        rank, lower, below = q * self.count, 0.0, 0.0
        for le in sorted(self.buckets):
            if self.buckets[le] >= rank:
                if le == float("inf"):
                    return 1000 * lower
                inside = self.buckets[le] - below
                return 1000 * (lower + (le - lower) * (rank - below) / inside)
            lower, below = le, self.buckets[le]
        return float("nan")


class Kubelet:
    """The node's kubelet through the API server's node proxy: its /metrics and its summary
    API."""

    def __init__(self, cluster: Cluster) -> None:
        self.core = client.CoreV1Api(config.new_client_from_config(config_file=cluster.kubeconfig))
        self.node = cluster.node

    def get(self, path: str) -> str:
        answer: Any = self.core.connect_get_node_proxy_with_path(
            self.node, path, _preload_content=False
        )
        return str(answer.data.decode())

    def dra_histograms(self) -> dict[str, Histogram]:
        return dra_histograms(self.get("metrics"))

    def pod_stats(self, pod: str) -> PodStats | None:
        return pod_stats(json.loads(self.get("stats/summary")), pod)


def dra_histograms(text: str) -> dict[str, Histogram]:
    """The kubelet's DRA gRPC histogram for this driver, by method (NodePrepareResources...)."""
    found: dict[str, Histogram] = {}
    for family in text_string_to_metric_families(text):
        if family.name != "dra_grpc_operations_duration_seconds":
            continue
        for sample in family.samples:
            if sample.labels.get("driver_name") != DRIVER:
                continue
            method = sample.labels.get("method_name", "").rsplit("/", 1)[-1]
            histogram = found.setdefault(method, Histogram())
            if sample.name.endswith("_count"):
                histogram.count += sample.value
            elif sample.name.endswith("_sum"):
                histogram.total += sample.value
            elif sample.name.endswith("_bucket"):
                le = float(sample.labels["le"])
                histogram.buckets[le] = histogram.buckets.get(le, 0.0) + sample.value
    return found


@dataclass
class PodStats:
    """One sample of the driver pod on the kubelet's summary API."""

    cpu_time: float  # the stat's own timestamp, seconds
    cpu_core_ns: int  # usageCoreNanoSeconds
    cpu_nanocores: int  # usageNanoCores
    rss_bytes: int
    working_set_bytes: int


def parse_time(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def pod_stats(summary: dict[str, Any], pod: str) -> PodStats | None:
    """The pod's sample in a /stats/summary answer (None until the kubelet has one)."""
    for entry in summary.get("pods", []):
        ref = entry["podRef"]
        if ref["name"] != pod or ref["namespace"] != NAMESPACE:
            continue
        cpu, memory = entry.get("cpu", {}), entry.get("memory", {})
        if "usageCoreNanoSeconds" not in cpu or "rssBytes" not in memory:
            return None
        return PodStats(
            parse_time(cpu["time"]),
            int(cpu["usageCoreNanoSeconds"]),
            int(cpu.get("usageNanoCores", 0)),
            int(memory["rssBytes"]),
            int(memory["workingSetBytes"]),
        )
    return None


@dataclass
class AuditCount:
    requests: int = 0
    slice_writes: int = 0
    slice_dry_runs: int = 0
    by_request: dict[str, int] = field(default_factory=dict)


def audit_count(log: Path, user: str, start: float, end: float) -> AuditCount:
    """The API server's audit events of `user` received in [start, end)."""
    counted = AuditCount()
    for line in log.read_text().splitlines():
        event = json.loads(line)
        if event.get("user", {}).get("username") != user:
            continue
        if not start <= parse_time(event["requestReceivedTimestamp"]) < end:
            continue
        counted.requests += 1
        resource = event.get("objectRef", {}).get("resource", "")
        what = f"{event['verb']} {resource}"
        counted.by_request[what] = counted.by_request.get(what, 0) + 1
        if resource == "resourceslices" and event["verb"] in WRITES:
            if "dryRun=" in event.get("requestURI", ""):
                counted.slice_dry_runs += 1
            else:
                counted.slice_writes += 1
    return counted


# ---- the drivers -----------------------------------------------------------------------------


@dataclass
class Driver:
    """One driver as a fleet owner installs it: a helm release of its own chart."""

    name: str  # "ours" or "reference"
    release: str
    chart: Path
    values: list[str]

    @property
    def user(self) -> str:
        return f"system:serviceaccount:{NAMESPACE}:{self.release}"

    def pod(self, cluster: Cluster) -> dict[str, Any] | None:
        items = cluster.get("pods", namespace=NAMESPACE)["items"]
        for pod in items:
            meta = pod["metadata"]
            release = meta.get("labels", {}).get("app.kubernetes.io/instance")
            if release == self.release and not meta.get("deletionTimestamp"):
                return dict(pod)
        return None

    def ready(self, cluster: Cluster) -> dict[str, Any] | None:
        pod = self.pod(cluster)
        if pod is None:
            return None
        conditions = {c["type"]: c["status"] for c in pod.get("status", {}).get("conditions", [])}
        return pod if conditions.get("Ready") == "True" else None

    def installed(self, cluster: Cluster) -> bool:
        return self.release in cluster.helm("list", "-n", NAMESPACE, "-q").split()


def reference_driver(cluster: Cluster, src: Path, image: str) -> Driver:
    if cluster.nri_socket != "/var/run/nri/nri.sock":
        raise fail(
            f"the reference's chart mounts /var/run/nri; the NRI socket is {cluster.nri_socket}"
        )
    repository, tag = image.rsplit(":", 1)
    values = [
        f"image.repository={repository}",
        f"image.tag={tag}",
        "image.pullPolicy=Never",
        f"kubeletRootDir={cluster.kubelet_root}",
        f"healthzPort={REFERENCE_HEALTH_PORT}",
        "driverConfig.cpuDeviceMode=grouped",
        "driverConfig.groupBy=numanode",
    ]
    chart = src / "deployment/helm/dra-driver-cpu"
    return Driver("reference", REFERENCE_RELEASE, chart, [a for v in values for a in ("--set", v)])


def our_driver(cluster: Cluster) -> Driver:
    return Driver("ours", RELEASE, ROOT / "helm/dra-driver-cpu", cluster.chart_values())


def uninstall(cluster: Cluster, driver: Driver) -> None:
    """The release gone, its pod gone, and no slice of the driver left (a slice a driver leaves
    behind would be the next one's to replace)."""
    if driver.installed(cluster):
        cluster.helm("uninstall", driver.release, "-n", NAMESPACE, "--wait", "--timeout", "180s")
    wait_for(lambda: driver.pod(cluster) is None, f"{driver.name} gone", timeout=180, interval=0.5)
    names = [s["metadata"]["name"] for s in cluster.slices()]
    if names:
        cluster.kubectl("delete", "resourceslice", *names, "--ignore-not-found")
    wait_for(lambda: not cluster.slices(), "no slice of dra.cpu", timeout=60, interval=0.5)


# ---- the workload ----------------------------------------------------------------------------


class Workload:
    """N claimed pods of 1 CPU, one after another: claim, pod, Running, pod deleted (the kubelet
    unprepares), claim deleted. Created and watched through the API directly, so the figure is
    the cluster's, not kubectl's start-up."""

    def __init__(self, cluster: Cluster) -> None:
        api = config.new_client_from_config(config_file=cluster.kubeconfig)
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.cluster = cluster

    def pod(self, name: str) -> dict[str, Any]:
        manifest: dict[str, Any] = json.loads(
            cluster_pod_manifest(name, [("work", ["c"])], [("c", name)])
        )
        manifest["metadata"]["labels"] = {"app": BENCH_LABEL}
        return manifest

    def create_to_running(self, name: str) -> float:
        """Creates the claim and the pod; seconds from the pod's create request to the watch
        event that shows it Running."""
        self.custom.create_namespaced_custom_object(
            "resource.k8s.io",
            "v1",
            "default",
            "resourceclaims",
            json.loads(claim_manifest(name, [cpus_request(1)])),
        )
        started = time.monotonic()
        # The client takes the manifest as it would be sent (its typed models are optional).
        created = self.core.create_namespaced_pod("default", self.pod(name))  # type: ignore[arg-type]
        stream = watch.Watch()
        for event in stream.stream(
            self.core.list_namespaced_pod,
            "default",
            field_selector=f"metadata.name={name}",
            resource_version=created.metadata.resource_version,  # type: ignore[union-attr]
            timeout_seconds=300,
        ):
            if event["object"].status.phase == "Running":
                stream.stop()
                return time.monotonic() - started
        raise fail(f"pod {name} not Running in 300 s: {self.cluster.prepare_failure(name)}")

    def gone(self, kind: str, name: str) -> bool:
        try:
            if kind == "pod":
                self.core.read_namespaced_pod(name, "default")
            else:
                self.custom.get_namespaced_custom_object(
                    "resource.k8s.io", "v1", "default", "resourceclaims", name
                )
        except ApiException as exc:
            if exc.status == 404:
                return True
            raise
        return False

    def delete(self, name: str) -> None:
        self.core.delete_namespaced_pod(name, "default")
        wait_for(partial(self.gone, "pod", name), f"pod {name} gone", timeout=120, interval=0.1)
        self.custom.delete_namespaced_custom_object(
            "resource.k8s.io", "v1", "default", "resourceclaims", name
        )
        wait_for(partial(self.gone, "claim", name), f"claim {name} gone", timeout=60, interval=0.1)

    def churn(self, driver: str, pods: int, kubelet: Kubelet) -> Churn:
        """The pods one after another, the kubelet's histogram read after each prepare and
        each unprepare: its sum moved by one call is that call's duration."""
        done = Churn()
        first = last = kubelet.dra_histograms()
        for i in range(pods):
            name = f"sbs-{driver}-{i}"
            done.create_to_running_s.append(self.create_to_running(name))
            now = kubelet.dra_histograms()
            done.prepare_ms += calls(PREPARE, last, now)
            self.delete(name)
            last, now = now, kubelet.dra_histograms()
            done.unprepare_ms += calls(UNPREPARE, last, now)
            last = now
        done.prepare = delta(PREPARE, first, last)
        done.unprepare = delta(UNPREPARE, first, last)
        return done


@dataclass
class Churn:
    create_to_running_s: list[float] = field(default_factory=list)
    prepare_ms: list[float] = field(default_factory=list)  # each call's duration
    unprepare_ms: list[float] = field(default_factory=list)
    prepare: Histogram = field(default_factory=Histogram)  # the whole churn's delta
    unprepare: Histogram = field(default_factory=Histogram)


def delta(method: str, before: dict[str, Histogram], after: dict[str, Histogram]) -> Histogram:
    return after.get(method, Histogram()).minus(before.get(method, Histogram()))


def calls(method: str, before: dict[str, Histogram], after: dict[str, Histogram]) -> list[float]:
    """The durations of the calls between two reads, in ms; when the kubelet made more than
    one (a retry), each is taken as their mean."""
    moved = delta(method, before, after)
    return [moved.mean_ms()] * round(moved.count)


# ---- one driver's turn -----------------------------------------------------------------------


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def turn(
    cluster: Cluster, driver: Driver, other: Driver, audit_log: Path, args: argparse.Namespace
) -> dict[str, Any]:
    """Installs `driver` alone, runs the churn and the idle window; its figures."""
    uninstall(cluster, other)
    uninstall(cluster, driver)
    say(f"{driver.name}: installing {driver.release} from {driver.chart}")
    installed_at = time.time()
    started = time.monotonic()
    cluster.helm("install", driver.release, str(driver.chart), "-n", NAMESPACE, *driver.values)
    pod = wait_for(
        partial(driver.ready, cluster), f"{driver.name} Ready", timeout=300, interval=0.2
    )
    install_to_ready = time.monotonic() - started
    wait_for(cluster.published, f"{driver.name}'s slice published", timeout=120, interval=0.3)
    name = pod["metadata"]["name"]
    say(f"{driver.name}: pod {name} Ready in {install_to_ready:.1f} s; {args.pods} claimed pods")
    kubelet = Kubelet(cluster)
    churn_start = time.time()
    churn = Workload(cluster).churn(driver.name, args.pods, kubelet)
    churn_end = time.time()
    create_to_running = churn.create_to_running_s
    say(f"{driver.name}: churn done; idle for {args.idle:.0f} s")
    samples = [wait_for(partial(kubelet.pod_stats, name), "the pod on /stats/summary", timeout=60)]
    idle_end = time.monotonic() + args.idle
    while time.monotonic() < idle_end:
        time.sleep(min(args.sample_every, max(0.0, idle_end - time.monotonic())))
        sample = kubelet.pod_stats(name)
        if sample is not None and sample.cpu_time > samples[-1].cpu_time:
            samples.append(sample)
    tenure_end = time.time()
    first, last = samples[0], samples[-1]
    if last.cpu_time <= first.cpu_time:
        raise fail(f"the kubelet's summary of {name} did not move during the idle window")
    core_seconds = (last.cpu_core_ns - first.cpu_core_ns) / 1e9
    idle_cpu = 1000 * core_seconds / (last.cpu_time - first.cpu_time)
    # The audit events of requests still open (watches) are written when they end: read the log
    # once the driver is gone.
    uninstall(cluster, driver)
    churn_audit = audit_count(audit_log, driver.user, churn_start, churn_end)
    tenure_audit = audit_count(audit_log, driver.user, installed_at, tenure_end)
    figures = {
        "idle_cpu_millicores": idle_cpu,
        "rss_mib": statistics.median(s.rss_bytes for s in samples) / MIB,
        "working_set_mib": statistics.median(s.working_set_bytes for s in samples) / MIB,
        "prepare_mean_ms": churn.prepare.mean_ms(),
        "prepare_p99_ms": percentile(churn.prepare_ms, 0.99),
        "unprepare_mean_ms": churn.unprepare.mean_ms(),
        "create_to_running_median_s": statistics.median(create_to_running),
        "create_to_running_p99_s": percentile(create_to_running, 0.99),
        "api_requests_per_claim": churn_audit.requests / args.pods,
        "slice_writes": tenure_audit.slice_writes,
        "install_to_ready_s": install_to_ready,
    }
    say(f"{driver.name}: " + " ".join(f"{k}={v:.3g}" for k, v in figures.items()))
    return {
        "figures": figures,
        "prepare_count": churn.prepare.count,
        "unprepare_count": churn.unprepare.count,
        "prepare_ms": churn.prepare_ms,
        "unprepare_ms": churn.unprepare_ms,
        "prepare_p99_ms_of_buckets": churn.prepare.quantile_ms(0.99),
        "create_to_running_s": create_to_running,
        "idle_samples": [s.__dict__ for s in samples],
        "idle_cpu_mean_of_usage_nanocores": statistics.mean(s.cpu_nanocores for s in samples) / 1e6,
        "load_average_after_idle": os.getloadavg(),  # the machine's other work, for the record
        "churn_requests": churn_audit.by_request,
        "tenure_requests": tenure_audit.by_request,
        "slice_dry_runs": tenure_audit.slice_dry_runs,
    }


# ---- the cluster -----------------------------------------------------------------------------


@contextmanager
def audited_cluster(work: Path, users: list[str], keep: bool) -> Iterator[Cluster]:
    """The one-node cluster, fresh, its API server writing the drivers' requests to an audit
    log; down again at the end unless `keep`."""
    policy, log = work / "audit-policy.yaml", work / "audit.log"
    policy.write_text(AUDIT_POLICY.format(users=", ".join(json.dumps(u) for u in users)))
    flags = f"--audit-policy-file={policy} --audit-log-path={log} --audit-log-format=json"
    env = {**os.environ, "DRACPU_CLUSTER_APISERVER_FLAGS": flags}
    cluster_sh = ["bash", str(ROOT / "tools/cluster.sh")]
    say("bringing the cluster up fresh (its API server audited)")
    run([*cluster_sh, "down"])  # a running cluster would be kept as it is, without the log
    try:
        run([*cluster_sh, "up"], env=env)
        yield Cluster()
    finally:
        if not keep:
            say("taking the cluster down")
            run([*cluster_sh, "down"])


def versions(cluster: Cluster) -> dict[str, str]:
    node = cluster.get("node", cluster.node, namespace="")["status"]["nodeInfo"]
    return {
        "kubelet": node["kubeletVersion"],
        "runtime": node["containerRuntimeVersion"],
        "kernel": node["kernelVersion"],
        "cgroup": "v2" if Path("/sys/fs/cgroup/cgroup.controllers").exists() else "v1",
        "cpus": str(os.cpu_count()),
    }


def report(rounds: list[dict[str, dict[str, Any]]]) -> list[str]:
    lines = []
    for figure in FIGURES:
        ours = statistics.median(r["ours"]["figures"][figure] for r in rounds)
        ref = statistics.median(r["reference"]["figures"][figure] for r in rounds)
        ratio = f"{ours / ref:.2f}" if ref else "inf"
        lines.append(f"side-by-side: {figure} ours={ours:.3g} reference={ref:.3g} ratio={ratio}")
    return lines


def positive(kind: Callable[[str], float]) -> Callable[[str], float]:
    def parse(text: str) -> float:
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be positive, not {text}")
        return value

    return parse


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reference-src", type=Path, required=True, help="the reference's git checkout")
    p.add_argument("--pods", type=positive(int), default=20, help="claimed pods per driver (20)")
    p.add_argument("--idle", type=positive(float), default=300, help="idle window, seconds (300)")
    p.add_argument("--rounds", type=positive(int), default=1, help="reference, ours: N times (1)")
    p.add_argument("--sample-every", type=positive(float), default=10, help="summary API, s (10)")
    p.add_argument("--json", type=Path, help="also write every sample here")
    p.add_argument("--build-only", action="store_true", help="build binary and image, then stop")
    p.add_argument("--keep", action="store_true", help="leave the cluster up at the end")
    args = p.parse_args()
    src = args.reference_src.resolve()
    commit = reference_commit(src)
    binary = build_binary(src, commit)
    archive, image = build_image(binary, commit)
    say(f"reference image {image} in {archive}")
    if args.build_only:
        return 0
    if os.geteuid() != 0:
        raise fail("not root: the cluster needs root (tools/cluster.sh)")
    missing = run(["bash", str(ROOT / "tools/cluster.sh"), "missing"]).strip()
    if missing:
        raise fail(f"the cluster cannot start: {missing.replace(chr(10), '; ')}")
    work = Path(tempfile.mkdtemp(prefix="dracpu-side-by-side-"))
    results: dict[str, Any] = {"reference_commit": commit, "rounds": []}
    try:
        users = [f"system:serviceaccount:{NAMESPACE}:{r}" for r in (RELEASE, REFERENCE_RELEASE)]
        with audited_cluster(work, users, args.keep) as cluster:
            say(f"importing {image} into the node's containerd")
            cluster.ctr("images", "import", str(archive))
            drivers = [reference_driver(cluster, src, image), our_driver(cluster)]
            results["versions"] = versions(cluster)
            say(" ".join(f"{k}={v}" for k, v in results["versions"].items()))
            for number in range(args.rounds):
                measured = {}
                for driver, other in zip(drivers, reversed(drivers), strict=True):
                    say(f"round {number + 1}/{args.rounds}: {driver.name}")
                    measured[driver.name] = turn(cluster, driver, other, work / "audit.log", args)
                results["rounds"].append(measured)
    except CommandError as exc:
        raise fail(str(exc)) from None
    finally:
        if args.json:
            args.json.write_text(json.dumps(results, indent=2, default=str) + "\n")
        shutil.rmtree(work, ignore_errors=True)
    for line in report(results["rounds"]):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
