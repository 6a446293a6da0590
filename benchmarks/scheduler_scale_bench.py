"""The real kube-scheduler allocating CPUs on hundreds of simulated nodes, per device layout,
against two baselines measured in the same run.

Starts the loopback control plane (tools/controlplane.sh: etcd, kube-apiserver, kube-scheduler,
kube-controller-manager) afresh for every mode, the scheduler's and the controller-manager's
client rates raised to --client-qps/--client-burst (far above what the run asks, so the
scheduler, not a client's rate limiter, sets the pace), and kwok (tools/build-kwok.sh builds it into
the cache when it is missing) to keep N fake Node objects Ready and mark bound pods Running.
Every node is the same machine, 2 sockets x 64 cores x 2 threads (256 CPUs) in 4 NUMA nodes, and
carries the ResourceSlices the dra-plugin publishes for it (the driver's own device model,
chunks and slice plan; harness.scale), created through the API server:

  individual  a device per CPU, two slices of at most 128 devices
  numanode    a device per NUMA node with consumable `dra.cpu/cpu`
  socket      a device per socket with consumable `dra.cpu/cpu`

and the baselines:

  nodra       no slices: the same pods ask their CPUs as plain `cpu` requests, no claim
  onedevice   one slice with one device per node, shared by every claim (the cheapest DRA
              shape: nothing to count or subtract)

Then P pods are created, 32 requests in flight, each with a claim from a ResourceClaimTemplate
of 1, 4, 16 or 32 CPUs in turn (`count` in individual mode, a `dra.cpu/cpu` capacity request
in the grouped ones); the controller-manager makes the claims and the scheduler allocates and
binds. Per mode: pods bound per second from the first create to the last binding, the
scheduling latency of each pod (its create request sent to its nodeName seen on a watch) at
p50 and p99, the CPU seconds the API server, scheduler, controller-manager, etcd and kwok
spent over that window (/proc/<pid>/stat), the API server's and scheduler's peak RSS (VmHWM),
the JSON bytes of one node's slices, the scheduler's failed attempts and its log lines
`timed out trying to allocate devices`, and whether a client was throttled: the scheduler's and
controller-manager's log lines about client-side throttling ("Waited before sending request"
... "client-side throttling", once "Waited for ... due to client-side throttling") and their
rest_client_rate_limiter_duration_seconds waits longer than 1 s (/metrics).

Prints, once every mode of a node count has run,
`scale: mode=... nodes=... pods=... pods_per_s=... p99_ms=... vs_nodra=... vs_onedevice=...
throttled=no|yes` per mode (pods/s as a ratio to each baseline) and a table;
writes scheduler-scale.json and scheduler-scale.svg (pods/s and p99 against nodes, one line per
layout) into --out.

Usage: python benchmarks/scheduler_scale_bench.py [--nodes 500] [--pods 2000]
           [--modes nodra,onedevice,individual,numanode,socket]
           [--client-qps 2000] [--client-burst 4000] [--sweep 100,250,500] [--pods-per-node K]
           [--budget SECONDS]
           [--out DIR] [--include EARLIER.json] [--draw-only] [--keep]
Ports: DRACPU_CP_*_PORT, defaulting to 27379/27380/27443/27459/27457 here.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import httpx
import yaml
from harness.control_plane import ControlPlane, missing_binaries
from harness.paths import CACHE
from harness.scale import (
    CLAIM_SIZES,
    DRA_TIMEOUT_LOG,
    FAKE_NODE_ANNOTATION,
    MODES,
    NAMESPACE,
    THROTTLE_LOG,
    Mode,
    Result,
    claim_template,
    device_class,
    discover_machine,
    draw_svg,
    fake_node,
    json_bytes,
    log_lines,
    mode_chunks,
    node_slices,
    percentile,
    pod,
    rate_limiter_waits,
    table,
    with_ratios,
)

from dracpu.core.machine import Machine

REPO = Path(__file__).resolve().parents[1]
KWOK_VERSION = "v0.8.0"
KWOK = CACHE / f"kwok-{KWOK_VERSION}" / "bin" / "kwok"
PORTS = {
    "DRACPU_CP_ETCD_PORT": "27379",
    "DRACPU_CP_ETCD_PEER_PORT": "27380",
    "DRACPU_CP_APISERVER_PORT": "27443",
    "DRACPU_CP_SCHEDULER_PORT": "27459",
    "DRACPU_CP_CONTROLLER_MANAGER_PORT": "27457",
}
IN_FLIGHT = 32
STALL_SECONDS = 90.0  # no pod bound for this long: the run ends with what was bound
CLOCK_TICK = os.sysconf("SC_CLK_TCK")

# kwok's Stages (the bare binary ships none): a fake node turns Ready and keeps its Ready
# condition fresh for the node lifecycle controller; a bound pod turns Running. Pod IPs are
# left out (the default pod CIDR would run dry at a few hundred pods).
KWOK_STAGES = """\
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {name: node-initialize}
spec:
  resourceRef: {apiGroup: v1, kind: Node}
  selector:
    matchExpressions:
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: NotIn
      values: ['True']
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      {{ range NodeConditions }}
      - lastHeartbeatTime: {{ $now | Quote }}
        lastTransitionTime: {{ $now | Quote }}
        message: {{ .message | Quote }}
        reason: {{ .reason | Quote }}
        status: {{ .status | Quote }}
        type: {{ .type | Quote }}
      {{ end }}
      allocatable: {cpu: "256", memory: 1Ti, pods: "1000"}
      capacity: {cpu: "256", memory: 1Ti, pods: "1000"}
      nodeInfo:
        architecture: amd64
        kubeletVersion: fake
        operatingSystem: linux
      phase: Running
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {name: node-heartbeat}
spec:
  resourceRef: {apiGroup: v1, kind: Node}
  selector:
    matchExpressions:
    - key: .status.phase
      operator: In
      values: [Running]
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: In
      values: ['True']
  delay: {durationMilliseconds: 20000, jitterDurationMilliseconds: 15000}
  next:
    statusTemplate: |
      {{ $now := Now }}
      {{ $created := or .metadata.creationTimestamp $now }}
      conditions:
      {{ range NodeConditions }}
      - lastHeartbeatTime: {{ $now | Quote }}
        lastTransitionTime: {{ $created | Quote }}
        message: {{ .message | Quote }}
        reason: {{ .reason | Quote }}
        status: {{ .status | Quote }}
        type: {{ .type | Quote }}
      {{ end }}
  immediateNextStage: true
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {name: pod-ready}
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
    - key: .metadata.deletionTimestamp
      operator: DoesNotExist
    - key: .status.phase
      operator: In
      values: [Pending]
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: NotIn
      values: ['True']
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      - {lastTransitionTime: {{ $now | Quote }}, status: "True", type: Initialized}
      - {lastTransitionTime: {{ $now | Quote }}, status: "True", type: Ready}
      - {lastTransitionTime: {{ $now | Quote }}, status: "True", type: ContainersReady}
      containerStatuses:
      {{ range .spec.containers }}
      - image: {{ .image | Quote }}
        name: {{ .name | Quote }}
        ready: true
        restartCount: 0
        state: {running: {startedAt: {{ $now | Quote }}}}
      {{ end }}
      phase: Running
      startTime: {{ $now | Quote }}
"""


def say(message: str) -> None:
    print(f"scheduler-scale: {message}", file=sys.stderr, flush=True)


# ---- the processes' own accounting -------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds of a process so far."""
    text = Path(f"/proc/{pid}/stat").read_text()
    fields = text.rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICK


def runqueue_seconds(pid: int) -> float:
    """Seconds the process's threads have spent runnable but waiting for a CPU
    (/proc/<pid>/task/*/schedstat, second field; threads that ended are not counted)."""
    total = 0
    for stat in Path(f"/proc/{pid}/task").glob("*/schedstat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            total += int(stat.read_text().split()[1])
    return total / 1e9


def machine_ticks() -> tuple[int, int]:
    """Busy and total CPU ticks of the whole machine so far, every process (/proc/stat)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    total = sum(fields[:8])  # user..steal; guest time is already in user
    return total - idle, total


def peak_rss_mib(pid: int) -> float:
    """The process's peak resident set (VmHWM) in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def component_metrics(cp: ControlPlane, port_variable: str) -> str | None:
    """A component's /metrics (the scheduler's or the controller-manager's), read with the
    admin certificate (its serving certificate is self-signed); None when it does not answer."""
    config = yaml.safe_load(cp.kubeconfig.read_text())
    user = config["users"][0]["user"]
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.load_cert_chain(user["client-certificate"], user["client-key"])
    port = cp.env.get(port_variable, PORTS[port_variable])
    try:
        response = httpx.get(f"https://127.0.0.1:{port}/metrics", verify=context, timeout=30)
        response.raise_for_status()
    except httpx.HTTPError:
        return None
    return response.text


def failed_attempts(text: str | None) -> int:
    """The scheduler's own count of attempts that placed no pod: no node fit, or a plugin failed,
    e.g. the DRA filter's time limit."""
    if text is None:
        return -1
    total = 0
    for line in text.splitlines():
        if not line.startswith("scheduler_schedule_attempts_total{"):
            continue
        if 'result="unschedulable"' in line or 'result="error"' in line:
            total += int(float(line.rsplit(" ", 1)[1]))
    return total


def recorded_pid(root: Path, name: str) -> int:
    return int((root / f"{name}.pid").read_text().strip())


def throttling(cp: ControlPlane) -> tuple[int, int]:
    """The scheduler's and controller-manager's log lines about client-side throttling, and
    their rate limiters' waits longer than 1 s since they started; -1 for what was not read."""
    lines = 0
    for name in ("scheduler", "controller-manager"):
        try:
            lines += log_lines(cp.log(name).read_text(errors="replace"), THROTTLE_LOG)
        except OSError:
            lines = -1
            break
    waits = 0
    for name, variable in (
        ("scheduler", "DRACPU_CP_SCHEDULER_PORT"),
        ("controller-manager", "DRACPU_CP_CONTROLLER_MANAGER_PORT"),
    ):
        text = component_metrics(cp, variable)
        if text is None or "rest_client_rate_limiter_duration_seconds_bucket" not in text:
            waits = -1
            break
        # Kept with the logs (--keep) for a closer look at queues and plugin durations.
        (cp.root / "logs" / f"{name}.metrics").write_text(text)
        waits += rate_limiter_waits(text)
    return lines, waits


# ---- the API server --------------------------------------------------------------------


def api_client(cp: ControlPlane) -> httpx.AsyncClient:
    """An admin client of the control plane's API server (its client certificate)."""
    config = yaml.safe_load(cp.kubeconfig.read_text())
    user = config["users"][0]["user"]
    cluster = config["clusters"][0]["cluster"]
    context = ssl.create_default_context(cafile=cluster["certificate-authority"])
    context.load_cert_chain(user["client-certificate"], user["client-key"])
    return httpx.AsyncClient(
        base_url=cluster["server"],
        verify=context,
        timeout=httpx.Timeout(60.0),
        limits=httpx.Limits(max_connections=IN_FLIGHT + 4, max_keepalive_connections=IN_FLIGHT),
    )


async def create(client: httpx.AsyncClient, path: str, body: dict[str, Any]) -> dict[str, Any]:
    for attempt in range(20):
        response = await client.post(path, json=body)
        if response.status_code in (429, 500, 503, 504) or (
            response.status_code == 403 and "not yet" in response.text
        ):
            await asyncio.sleep(0.2 * (attempt + 1))
            continue
        if response.status_code >= 300:
            raise RuntimeError(f"POST {path}: {response.status_code} {response.text[:300]}")
        document: dict[str, Any] = response.json()
        return document
    raise RuntimeError(f"POST {path}: still refused after 20 attempts")


async def bounded(jobs: Sequence[Callable[[], Awaitable[None]]], limit: int = IN_FLIGHT) -> None:
    """Runs every job with at most `limit` running at once."""
    gate = asyncio.Semaphore(limit)

    async def one(job: Callable[[], Awaitable[None]]) -> None:
        async with gate:
            await job()

    await asyncio.gather(*(one(job) for job in jobs))


async def list_items(client: httpx.AsyncClient, path: str) -> dict[str, Any]:
    response = await client.get(path)
    response.raise_for_status()
    document: dict[str, Any] = response.json()
    return document


def ready(node: dict[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


# ---- kwok ------------------------------------------------------------------------------


def ensure_kwok() -> Path:
    if not KWOK.exists():
        say(f"kwok missing in {KWOK.parent}: tools/build-kwok.sh")
        subprocess.run(["bash", str(REPO / "tools" / "build-kwok.sh")], check=True)
    if not KWOK.exists():
        raise SystemExit(f"scheduler-scale: tools/build-kwok.sh left no {KWOK}")
    return KWOK


@contextlib.contextmanager
def kwok_running(cp: ControlPlane, root: Path) -> Any:
    stages = root / "kwok-stages.yaml"
    stages.write_text(KWOK_STAGES)
    with (root / "logs" / "kwok.log").open("ab") as out:
        proc = subprocess.Popen(
            [
                str(KWOK),
                "--kubeconfig", str(cp.kubeconfig),
                "--config", str(stages),
                f"--manage-nodes-with-annotation-selector={FAKE_NODE_ANNOTATION}=fake",
                "--node-ip", "10.200.0.1",
            ],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# ---- one layout ------------------------------------------------------------------------


async def setup_nodes(
    client: httpx.AsyncClient, machine: Machine, layout: Mode, nodes: int
) -> tuple[int, int, int]:
    """Nodes, their slices and the claim templates; returns slices, devices and bytes per node."""
    await create(client, "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
    if layout != "nodra":
        await create(client, "/apis/resource.k8s.io/v1/deviceclasses", device_class(layout))
        for size in CLAIM_SIZES:
            await create(
                client,
                f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaimtemplates",
                claim_template(layout, size),
            )
    chunks = mode_chunks(machine, layout)
    names = [f"kwok-node-{i:04d}" for i in range(nodes)]
    sizes: list[int] = []

    async def node_and_slices(name: str) -> None:
        stored = await create(client, "/api/v1/nodes", fake_node(name))
        slices = node_slices(chunks, name, stored["metadata"]["uid"]) if chunks else []
        sizes.append(json_bytes(slices) if slices else 0)
        for document in slices:
            await create(client, "/apis/resource.k8s.io/v1/resourceslices", document)

    began = time.monotonic()
    await bounded([lambda n=n: node_and_slices(n) for n in names])  # type: ignore[misc]
    say(f"{layout}: {nodes} nodes and their slices created in {time.monotonic() - began:.0f} s")
    deadline = time.monotonic() + 300
    while True:
        listed = await list_items(client, "/api/v1/nodes")
        count = sum(1 for n in listed["items"] if ready(n))
        if count >= nodes:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {count} of {nodes} nodes Ready after 300 s (kwok.log)")
        await asyncio.sleep(2)
    say(f"{layout}: {nodes} nodes Ready after {time.monotonic() - began:.0f} s")
    return len(chunks), sum(len(c) for c in chunks), max(sizes)


def note_bound(obj: dict[str, Any], bound_at: dict[str, float]) -> None:
    name = (obj.get("metadata") or {}).get("name")
    if name and name not in bound_at and (obj.get("spec") or {}).get("nodeName"):
        bound_at[name] = time.monotonic()


async def watch_bindings(client: httpx.AsyncClient, bound_at: dict[str, float]) -> None:
    """Records when each pod of the namespace is first seen with a nodeName: a list of the bound
    pods, then a watch from there, listed and watched again whenever the server ends the watch
    (it drops a watcher that falls behind)."""
    path = f"/api/v1/namespaces/{NAMESPACE}/pods"
    while True:
        listed = await list_items(client, f"{path}?fieldSelector=spec.nodeName%21%3D")
        for item in listed["items"]:
            note_bound(item, bound_at)
        params = {
            "watch": "1",
            "resourceVersion": listed["metadata"]["resourceVersion"],
            "allowWatchBookmarks": "true",
            "fieldSelector": "spec.nodeName!=",
            "timeoutSeconds": "3600",
        }
        async with client.stream("GET", path, params=params, timeout=None) as response:
            response.raise_for_status()
            async for line in response.aiter_lines():
                if not line.strip():
                    continue
                event = json.loads(line)
                if event.get("type") == "ERROR":
                    say(f"pod watch: {event.get('object', {}).get('message', event)}")
                    break
                note_bound(event.get("object") or {}, bound_at)
        say(f"pod watch ended with {len(bound_at)} pods bound; watching again")


async def drive_pods(
    client: httpx.AsyncClient,
    watch_client: httpx.AsyncClient,
    mode: Mode,
    pods: int,
    budget: float,
) -> tuple[dict[str, float], dict[str, float], float, float]:
    """Creates the pods and waits until every one is bound, binding stalls or `budget` seconds
    from the first create have passed; returns the create and bound times by pod, when the
    wait ended and the seconds the creates took."""
    created_at: dict[str, float] = {}
    bound_at: dict[str, float] = {}
    watcher = asyncio.create_task(watch_bindings(watch_client, bound_at))
    await asyncio.sleep(0.5)

    async def one(index: int) -> None:
        document = pod(index, mode)
        name = document["metadata"]["name"]
        created_at[name] = time.monotonic()
        await create(client, f"/api/v1/namespaces/{NAMESPACE}/pods", document)

    began = time.monotonic()
    await bounded([lambda i=i: one(i) for i in range(pods)])  # type: ignore[misc]
    creating = time.monotonic() - began
    say(f"{pods} pods created in {creating:.1f} s")
    seen, progress = 0, time.monotonic()
    while len(bound_at) < pods:
        now = time.monotonic()
        if watcher.done():
            watcher.result()  # raises what ended the watch
            break
        if len(bound_at) != seen:
            seen, progress = len(bound_at), now
        elif now - progress > STALL_SECONDS:
            say(f"no pod bound for {STALL_SECONDS:.0f} s: {len(bound_at)} of {pods} bound")
            break
        if now - began > budget:
            say(f"budget of {budget:.0f} s spent: {len(bound_at)} of {pods} bound")
            break
        await asyncio.sleep(0.2)
    ended = time.monotonic()
    watcher.cancel()
    with contextlib.suppress(asyncio.CancelledError, httpx.HTTPError):
        await watcher
    return created_at, bound_at, ended, creating


async def measure(
    cp: ControlPlane,
    machine: Machine,
    layout: Mode,
    nodes: int,
    pods: int,
    budget: float,
    kwok: int,
) -> Result:
    root = cp.root
    async with api_client(cp) as client, api_client(cp) as watch_client:
        slices, devices, size = await setup_nodes(client, machine, layout, nodes)
        await asyncio.sleep(3)  # the scheduler's informers take in the last slices
        names = ("apiserver", "scheduler", "controller-manager", "etcd")
        pids = [recorded_pid(root, name) for name in names] + [kwok]
        cpu_before = [cpu_seconds(pid) for pid in pids]
        wait_before = [runqueue_seconds(pid) for pid in pids[:2]]
        ticks_before = machine_ticks()
        created_at, bound_at, ended, creating = await drive_pods(
            client, watch_client, layout, pods, budget
        )
        cpu = [cpu_seconds(pid) - before for pid, before in zip(pids, cpu_before, strict=True)]
        wait = [runqueue_seconds(p) - w for p, w in zip(pids[:2], wait_before, strict=True)]
        ticks_after = machine_ticks()
        busy = (ticks_after[0] - ticks_before[0]) / max(ticks_after[1] - ticks_before[1], 1)
        apiserver, scheduler = pids[0], pids[1]
        scheduler_metrics = await asyncio.to_thread(
            component_metrics, cp, "DRACPU_CP_SCHEDULER_PORT"
        )
        throttle_lines, throttle_waits = await asyncio.to_thread(throttling, cp)
    timeouts = log_lines(cp.log("scheduler").read_text(errors="replace"), DRA_TIMEOUT_LOG)
    first = min(created_at.values())
    # Every pod bound: up to the last binding; otherwise up to the end of the wait.
    last = max(bound_at.values(), default=ended) if len(bound_at) >= pods else ended
    seconds = max(last - first, 1e-9)
    latencies = [(bound_at[n] - created_at[n]) * 1000 for n in bound_at if n in created_at]
    return Result(
        mode=layout,
        nodes=nodes,
        pods=pods,
        bound=len(bound_at),
        seconds=round(seconds, 2),
        pods_per_s=len(bound_at) / seconds,
        p50_ms=percentile(latencies, 50),
        p99_ms=percentile(latencies, 99),
        apiserver_cpu_s=cpu[0],
        scheduler_cpu_s=cpu[1],
        apiserver_rss_mib=peak_rss_mib(apiserver),
        scheduler_rss_mib=peak_rss_mib(scheduler),
        slices_per_node=slices,
        devices_per_node=devices,
        slice_bytes_per_node=size,
        failed_attempts=failed_attempts(scheduler_metrics),
        controller_manager_cpu_s=cpu[2],
        etcd_cpu_s=cpu[3],
        kwok_cpu_s=cpu[4],
        throttle_log_lines=throttle_lines,
        throttle_waits=throttle_waits,
        dra_timeouts=timeouts,
        created_per_s=pods / max(creating, 1e-9),
        machine_busy=busy,
        apiserver_cpu_wait_s=wait[0],
        scheduler_cpu_wait_s=wait[1],
    )


@contextlib.asynccontextmanager
async def control_plane(root: Path, qps: int, burst: int) -> AsyncIterator[ControlPlane]:
    env = {k: os.environ.get(k, v) for k, v in PORTS.items()}
    if qps > 0:
        env |= {"DRACPU_CP_CLIENT_QPS": str(qps), "DRACPU_CP_CLIENT_BURST": str(max(burst, qps))}
    cp = ControlPlane(root, env=env)
    await asyncio.to_thread(cp.up)
    try:
        yield cp
    finally:
        await asyncio.to_thread(cp.down)


async def run_layout(
    base: Path, machine: Machine, layout: Mode, nodes: int, pods: int, args: argparse.Namespace
) -> Result:
    root = base / f"{layout}-{nodes}"
    say(f"{layout}: control plane in {root}")
    async with control_plane(root, args.client_qps, args.client_burst) as cp:
        (root / "logs").mkdir(exist_ok=True)
        with kwok_running(cp, root) as kwok:
            result = await measure(cp, machine, layout, nodes, pods, args.budget, kwok.pid)
    busiest, cores = result.busiest()
    say(
        f"{layout}: {result.bound} of {pods} bound, {result.pods_per_s:.1f} pods/s; CPU cores "
        f"over {result.seconds:.0f} s: apiserver {result.apiserver_cpu_s / result.seconds:.2f}, "
        f"scheduler {result.scheduler_cpu_s / result.seconds:.2f}, controller-manager "
        f"{result.controller_manager_cpu_s / result.seconds:.2f}, etcd "
        f"{result.etcd_cpu_s / result.seconds:.2f}, kwok {result.kwok_cpu_s / result.seconds:.2f}"
        f" (busiest {busiest}, {cores:.2f}); the machine {result.machine_busy:.0%} busy "
        f"({os.cpu_count()} cores, every process); waiting for a CPU: apiserver "
        f"{result.apiserver_cpu_wait_s:.0f} s, scheduler {result.scheduler_cpu_wait_s:.0f} s; "
        f"throttle log lines {result.throttle_log_lines}, "
        f"rate limiter waits over 1 s {result.throttle_waits}; DRA timeouts "
        f"{result.dra_timeouts}, failed attempts {result.failed_attempts}"
    )
    return result


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument(
        "--client-qps", type=int, default=2000,
        help="the scheduler's and controller-manager's --kube-api-qps (0: their defaults)",
    )  # fmt: skip
    parser.add_argument(
        "--client-burst", type=int, default=4000,
        help="their --kube-api-burst (at least --client-qps)",
    )  # fmt: skip
    parser.add_argument(
        "--pods-per-node", type=int, default=0,
        help="pods for each node count instead of --pods (a sweep at the same load per node)",
    )  # fmt: skip
    parser.add_argument("--sweep", default="", help="node counts, e.g. 100,250,500")
    parser.add_argument("--out", type=Path, default=None, help="results JSON and SVG here")
    parser.add_argument(
        "--budget", type=float, default=300.0,
        help="seconds from the first create after which a layout ends with what is bound",
    )  # fmt: skip
    parser.add_argument(
        "--include", type=Path, action="append", default=[],
        help="an earlier run's scheduler-scale.json, drawn and tabled with this run's results",
    )  # fmt: skip
    parser.add_argument(
        "--draw-only", action="store_true",
        help="run nothing: table and draw the --include results again",
    )  # fmt: skip
    parser.add_argument("--keep", action="store_true", help="keep the folders (logs, etcd)")
    args = parser.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        parser.error(f"unknown modes {unknown}; choose from {','.join(MODES)}")
    args.modes = modes
    args.sweep = [int(n) for n in args.sweep.split(",") if n] or [args.nodes]
    return args


async def main_async(args: argparse.Namespace) -> list[Result]:
    machine = discover_machine()
    base = Path(tempfile.mkdtemp(prefix="scale-", dir="/tmp"))
    results: list[Result] = []
    try:
        for nodes in args.sweep:
            pods = args.pods_per_node * nodes if args.pods_per_node > 0 else args.pods
            group: list[Result] = []
            for layout in args.modes:
                group.append(await run_layout(base, machine, layout, nodes, pods, args))
            group = with_ratios(group)
            results += group
            for result in group:
                print(result.line(), flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
        else:
            say(f"kept {base}")
    return results


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    results: list[Result] = []
    if not args.draw_only:
        missing = missing_binaries()
        if missing:
            print(f"scheduler-scale: skipped: {missing}")
            return 0
        ensure_kwok()
        results = asyncio.run(main_async(args))
    for earlier in args.include:
        results += [Result(**r) for r in json.loads(earlier.read_text())]
    results.sort(key=lambda r: (r.nodes, MODES.index(r.mode)))
    print(table(results))
    out: Path = args.out or Path(tempfile.mkdtemp(prefix="scale-results-", dir="/tmp"))
    out.mkdir(parents=True, exist_ok=True)
    (out / "scheduler-scale.json").write_text(
        json.dumps([asdict(r) for r in results], indent=1) + "\n"
    )
    per_node = f"{args.pods_per_node} pods per node" if args.pods_per_node else f"{args.pods} pods"
    caption = f"{per_node}, 256-CPU nodes, {os.cpu_count()} cores"
    (out / "scheduler-scale.svg").write_text(draw_svg(results, caption))
    say(f"results in {out}")
    for r in results:
        if r.bound < r.pods:
            say(f"{r.mode} at {r.nodes} nodes: {r.bound} of {r.pods} pods bound in the budget")
    return 0


if __name__ == "__main__":
    sys.exit(main())
