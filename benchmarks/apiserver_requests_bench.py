"""API server requests caused by the dra-plugin, per node per minute, as the server counts them.

Starts a real control plane (tools/controlplane.sh: etcd, kube-apiserver, kube-scheduler,
kube-controller-manager on loopback), one topology service and one allocator on a sysfs fixture,
and N dra-plugin processes with distinct node names (one Node object each) sharing that
allocator, so 50 simulated nodes stay light on a small machine. Reads the apiserver's own
`apiserver_request_total` from its /metrics before and after each window:

  baseline  no plugin running (the scheduler's and controller-manager's own watches)
  steady    the plugins' slices published and converged; nothing changes
  churn     claims started at a fixed rate, allocated by the real scheduler (a pod per claim,
            bound to a node by nodeSelector), prepared and unprepared through the kubelet
            stand-in, deleted (the benchmark's own GETs of claims are subtracted)

The plugin's requests are those on resourceslices (any verb), GET nodes (its owner UID) and GET
resourceclaims (prepare); the churn window also reports every request of the window (pods,
claims, bindings: the scheduler's and the test's share). Per window: the requests per node per
minute, and for churn the claims per minute driven.

Usage: python benchmarks/apiserver_requests_bench.py [--nodes 1,50] [--window SECONDS]
           [--churn-claims N] [--churn-rate PER_MINUTE] [--keep]
Ports: DRACPU_CP_*_PORT (defaults of tools/controlplane.sh plus 100, to stay clear of tests).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from harness.control_plane import CommandError, ControlPlane, missing_binaries
from harness.services import wait_serving
from harness.waits import wait_for
from prometheus_client.parser import text_string_to_metric_families

from dracpu.core.driver import CPU_CAPACITY, DRIVER_NAME
from dracpu.dev.kubelet_sim import Claim, KubeletSim, RegisteredPlugin
from dracpu.topology.fixtures import write_fixture

BIN = Path(sys.executable).parent
PORTS = {
    "DRACPU_CP_ETCD_PORT": "16479",
    "DRACPU_CP_ETCD_PEER_PORT": "16480",
    "DRACPU_CP_APISERVER_PORT": "16543",
    "DRACPU_CP_SCHEDULER_PORT": "16559",
    "DRACPU_CP_CONTROLLER_MANAGER_PORT": "16557",
}
Key = tuple[str, str]  # (verb, resource)


def request_counts(cp: ControlPlane) -> Counter[Key]:
    counts: Counter[Key] = Counter()
    for family in text_string_to_metric_families(cp.raw("/metrics")):
        if family.name != "apiserver_request":
            continue
        for sample in family.samples:
            if sample.name == "apiserver_request_total":
                labels = sample.labels
                counts[(labels.get("verb", ""), labels.get("resource", ""))] += int(sample.value)
    return counts


def plugin_share(delta: Counter[Key]) -> int:
    """Requests a dra-plugin makes: resourceslices (all verbs), GET nodes, GET resourceclaims."""
    return sum(
        n
        for (verb, resource), n in delta.items()
        if resource == "resourceslices"
        or (verb == "GET" and resource in ("nodes", "resourceclaims"))
    )


class Fleet:
    """One topology + allocator, N dra-plugins with node names bench-000..."""

    def __init__(self, cp: ControlPlane, root: Path, fixture: str, prefix: str) -> None:
        self.cp = cp
        self.prefix = prefix
        self.root = root
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.sysfs = write_fixture(fixture, root / "sys")
        (root / "config.yaml").write_text(yaml.safe_dump({"apiVersion": "v1alpha1"}))
        self.nodes: list[str] = []

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        with (self.root / f"{name}.log").open("ab") as out:
            self.procs[name] = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                env={**os.environ, **(env or {})},
            )  # fmt: skip

    async def _ready(self, name: str, socket: Path) -> None:
        log = self.root / f"{name}.log"
        await wait_serving(socket, self.procs[name], what=name, log=log, timeout=120, interval=0.2)

    async def start_allocator(self) -> None:
        topology = self.root / "topology.sock"
        self._spawn("topology", [str(BIN / "dracpu-topology"), "--socket", str(topology),
                                 "--sysfs-root", str(self.sysfs)])  # fmt: skip
        await self._ready("topology", self.root / "topology.sock")
        self._spawn("allocator", [str(BIN / "dracpu-allocator"), "--socket",
                                  str(self.root / "allocator.sock"), "--topology-socket",
                                  str(self.root / "topology.sock"), "--state-dir",
                                  str(self.root / "state"), "--cdi-dir", str(self.root / "cdi"),
                                  "--config", str(self.root / "config.yaml")])  # fmt: skip
        await self._ready("allocator", self.root / "allocator.sock")

    async def start_plugins(self, count: int) -> None:
        for i in range(len(self.nodes), count):
            node = f"{self.prefix}-{i:03d}"
            self.cp.register_node(node)
            self.nodes.append(node)
            self._spawn(node, [
                str(BIN / "dracpu-dra-plugin"), "--socket", str(self.root / f"{node}.sock"),
                "--allocator-socket", str(self.root / "allocator.sock"),
                "--kubelet-root-dir", str(self.root / "k" / node),
                "--cdi-dir", str(self.root / "cdi"), "--kubeconfig", str(self.cp.kubeconfig),
                "--config", str(self.root / "config.yaml"),
            ], env={"NODE_NAME": node})  # fmt: skip
        for node in self.nodes:
            await self._ready(node, self.root / f"{node}.sock")

    def published(self) -> bool:
        slices = self.cp.items("resourceslices")
        pools = {s["spec"]["pool"]["name"] for s in slices if s["spec"]["driver"] == DRIVER_NAME}
        return pools >= set(self.nodes)

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()


def claim_and_pod(name: str, node: str) -> tuple[dict[str, Any], dict[str, Any]]:
    claim = {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "cpus", "exactly": {
            "deviceClassName": DRIVER_NAME, "allocationMode": "ExactCount", "count": 1,
            "capacity": {"requests": {CPU_CAPACITY: "2"}}}}]}},
    }  # fmt: skip
    pod = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
        "spec": {"nodeSelector": {"kubernetes.io/hostname": node},
                 "tolerations": [{"operator": "Exists"}],
                 "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                                 "resources": {"claims": [{"name": "cpus"}]}}],
                 "resourceClaims": [{"name": "cpus", "resourceClaimName": name}]},
    }  # fmt: skip
    return claim, pod


async def churn(
    cp: ControlPlane, fleet: Fleet, claims: int, per_minute: float
) -> tuple[float, list[float], int]:
    """Claims through their whole life, round-robin over the nodes, started at `per_minute`;
    seconds, latencies, and the GETs of claims this driver made itself (to subtract)."""
    from kubernetes import client, config

    api = config.new_client_from_config(config_file=str(cp.kubeconfig))
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    plugins: dict[str, RegisteredPlugin] = {}
    latencies: list[float] = []
    own_gets = 0
    start = time.monotonic()
    for i in range(claims):
        await asyncio.sleep(max(0.0, start + i * 60 / per_minute - time.monotonic()))
        node = fleet.nodes[i % len(fleet.nodes)]
        if node not in plugins:
            kubelet = KubeletSim(fleet.root / "k" / node)
            plugins[node] = await kubelet.register(DRIVER_NAME, timeout=30)
        name = f"churn-{i:04d}"
        claim, pod = claim_and_pod(name, node)
        began = time.monotonic()
        stored = custom.create_namespaced_custom_object(
            "resource.k8s.io", "v1", "default", "resourceclaims", claim
        )
        core.create_namespaced_pod("default", pod)

        def allocated(n: str = name) -> bool:
            nonlocal own_gets
            own_gets += 1
            got = custom.get_namespaced_custom_object(
                "resource.k8s.io", "v1", "default", "resourceclaims", n
            )
            return bool((got.get("status") or {}).get("allocation"))

        wait_for(allocated, f"{name} allocated", timeout=60, interval=0.2)
        ref = Claim("default", name, stored["metadata"]["uid"])
        answer = await plugins[node].prepare([ref])
        if answer[ref.uid].error:
            raise SystemExit(f"prepare {name}: {answer[ref.uid].error}")
        latencies.append(time.monotonic() - began)
        await plugins[node].unprepare([ref])
        core.delete_namespaced_pod(name, "default", grace_period_seconds=0)
        custom.delete_namespaced_custom_object(
            "resource.k8s.io", "v1", "default", "resourceclaims", name
        )
    for plugin in plugins.values():
        await plugin.close()
    return time.monotonic() - start, latencies, own_gets


def rate(requests: int, nodes: int, seconds: float) -> float:
    return requests / max(nodes, 1) / (seconds / 60)


@contextmanager
def control_plane(keep: bool) -> Iterator[ControlPlane]:
    root = Path(tempfile.mkdtemp(prefix="dracpu-bench-cp-"))
    cp = ControlPlane(root, {k: os.environ.get(k, v) for k, v in PORTS.items()})
    cp.up()
    try:
        yield cp
    finally:
        cp.down()
        if not keep:
            shutil.rmtree(root, ignore_errors=True)


async def measure(
    cp: ControlPlane,
    nodes: int,
    window: float,
    claims: int,
    per_minute: float,
    keep: bool,
    args_settle: float = 70.0,
) -> None:
    root = Path(tempfile.mkdtemp(prefix="apib", dir="/tmp"))
    fleet = Fleet(cp, root, "xeon-2s-ht", f"bench{nodes}")
    try:
        await fleet.start_allocator()
        before = request_counts(cp)
        await asyncio.sleep(window)
        baseline = request_counts(cp) - before
        print(f"\n{nodes} node(s), window {window:.0f} s")
        print(f"  baseline (no plugin): {plugin_share(baseline)} slice/node/claim requests, "
              f"{sum(baseline.values())} in all")  # fmt: skip

        t0 = time.monotonic()
        await fleet.start_plugins(nodes)
        wait_for(fleet.published, "every node's slices", timeout=600, interval=0.2)
        print(f"  {nodes} plugin(s) started and published in {time.monotonic() - t0:.1f} s")
        # Settle: the controller-manager marks the heartbeat-less Nodes NotReady (a GET, PUT
        # and PATCH of each Node) about 50 s after they were created; not the plugin's doing.
        await asyncio.sleep(args_settle)

        before = request_counts(cp)
        await asyncio.sleep(window)
        steady = request_counts(cp) - before
        share = plugin_share(steady) - plugin_share(baseline)
        print(f"  steady: {rate(share, nodes, window):.3f} requests/node/minute "
              f"({share} plugin requests in {window:.0f} s; by verb/resource: "
              f"{dict(sorted((k, v) for k, v in steady.items() if v))})")  # fmt: skip

        before = request_counts(cp)
        seconds, latencies, own_gets = await churn(cp, fleet, claims, per_minute)
        during = request_counts(cp) - before
        share = plugin_share(during) - own_gets
        latencies.sort()
        p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
        print(f"  churn: {claims} claims in {seconds:.1f} s ({claims / seconds * 60:.1f}/min); "
              f"create->allocated->prepared median {statistics.median(latencies):.2f} s, "
              f"p99 {p99:.2f} s")  # fmt: skip
        print(f"  churn: plugin {rate(share, nodes, seconds):.2f} requests/node/minute "
              f"({share} requests; {share / claims:.2f} per claim); all requests "
              f"{rate(sum(during.values()), nodes, seconds):.1f}/node/minute")  # fmt: skip
    finally:
        fleet.close()
        for node in fleet.nodes:
            cp.kubectl("delete", "node", node, "--wait=false")
        if not keep:
            shutil.rmtree(root, ignore_errors=True)


async def main_async(args: argparse.Namespace) -> int:
    reason = missing_binaries()
    if reason:
        print(f"apiserver_requests_bench: skipped: {reason}")
        return 0
    with control_plane(args.keep) as cp:
        selector = {"cel": {"expression": f'device.driver == "{DRIVER_NAME}"'}}
        cp.apply(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": DRIVER_NAME},
                "spec": {"selectors": [selector]},
            }
        )
        for nodes in args.nodes:
            await measure(cp, nodes, args.window, args.churn_claims, args.churn_rate, args.keep)
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=lambda t: [int(x) for x in t.split(",")], default=[1, 50])
    p.add_argument("--window", type=float, default=120.0, help="seconds per measured window")
    p.add_argument("--churn-claims", type=int, default=30)
    p.add_argument("--churn-rate", type=float, default=60.0, help="claims started per minute")
    p.add_argument("--keep", action="store_true", help="keep the folders for inspection")
    try:
        return asyncio.run(main_async(p.parse_args()))
    except CommandError as exc:
        print(f"apiserver_requests_bench: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
