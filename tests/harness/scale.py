"""The pure half of the scheduler scale benchmark (benchmarks/scheduler_scale_bench.py): the
machine every simulated node has, the ResourceSlices the dra-plugin publishes for it in each
layout (renamed per node), the claim templates and pods the benchmark creates, the percentile
it reports, and the picture it draws from its results.

A layout is one of `individual` (a device per CPU), `numanode` and `socket` (grouped devices
with consumable capacity). Two baselines run beside them: `nodra`, the same pods asking plain
`cpu` requests and no claim, and `onedevice`, the cheapest DRA shape (one slice per node holding
one device that any number of claims may share, each pod's claim asking for it). A layout's
slices come from the driver's own code: the allocator's device model with the configuration's
defaults (`minSharedCPUs: 1` withholds the shared pool's first CPU), the allocator's
DeviceList, and the dra-plugin's device documents, chunks and plan.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal
from xml.sax.saxutils import escape

from dracpu.allocator.claims import NodeState
from dracpu.allocator.domain.device_health import HealthBook
from dracpu.allocator.domain.devices import DeviceModel, DeviceOptions, build_devices
from dracpu.allocator.rpc.wire import device_list
from dracpu.core.config import DriverConfig
from dracpu.core.driver import CPU_CAPACITY, DRIVER_NAME
from dracpu.core.machine import Machine
from dracpu.dra_plugin.publishing.slices import Owner, plan
from dracpu.pb.allocator.v1 import allocator_pb2
from dracpu.topology.discovery import discover
from dracpu.topology.fixtures import MachineSpec, write_fixture
from harness.published import chunk_devices

Layout = Literal["individual", "numanode", "socket"]
LAYOUTS: tuple[Layout, ...] = ("individual", "numanode", "socket")
Baseline = Literal["nodra", "onedevice"]
BASELINES: tuple[Baseline, ...] = ("nodra", "onedevice")
Mode = Layout | Baseline
MODES: tuple[Mode, ...] = (*BASELINES, *LAYOUTS)
ONE_DEVICE = "node"
CLAIM_SIZES = (1, 4, 16, 32)
NAMESPACE = "scale"
DEVICE_CLASS = "dra.cpu"
FAKE_NODE_ANNOTATION = "kwok.x-k8s.io/node"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"

# Every simulated node: 2 sockets x 64 cores x 2 threads (256 CPUs), 2 NUMA nodes per socket.
SCALE_MACHINE = MachineSpec(
    "256 CPUs: 2 sockets x 64 cores with SMT, 4 NUMA nodes, L3 per 8 cores",
    sockets=2,
    cores_per_socket=64,
    threads_per_core=2,
    numa_per_socket=2,
    cores_per_l3=8,
)


def discover_machine(spec: MachineSpec = SCALE_MACHINE) -> Machine:
    """The machine as the topology service reads it from the fixture's sysfs tree."""
    root = Path(tempfile.mkdtemp(prefix="scale-machine-"))
    try:
        return discover(write_fixture(spec, root))
    finally:
        shutil.rmtree(root, ignore_errors=True)


def layout_options(layout: Layout, min_shared: int | None = None) -> DeviceOptions:
    """The allocator's device options for a layout, otherwise the configuration's defaults."""
    defaults = DriverConfig()
    floor = defaults.min_shared_cpus if min_shared is None else min_shared
    if layout == "individual":
        return DeviceOptions(mode="individual", min_shared=floor)
    return DeviceOptions(mode="grouped", group_by=layout, min_shared=floor)


def published_model(state: NodeState) -> DeviceModel:
    """The devices the allocator publishes for a node state: its model less the withheld CPUs
    (the shared pool's floor, and CPUs no device accounts for)."""
    withheld = state.withheld
    if not withheld:
        return state.devices
    return build_devices(state.machine, state.devices.options, withheld)


def published_devices(machine: Machine, layout: Layout) -> allocator_pb2.DeviceList:
    """The allocator's DeviceList for a fresh node of `machine` in `layout`."""
    options = layout_options(layout)
    state = NodeState(machine=machine, devices=build_devices(machine, options))
    devices: allocator_pb2.DeviceList = device_list(published_model(state), 1, HealthBook())
    return devices


def layout_chunks(machine: Machine, layout: Layout) -> list[list[dict[str, Any]]]:
    """The device documents of every slice of one node, as the dra-plugin chunks them."""
    return chunk_devices(published_devices(machine, layout))


def one_device_chunks() -> list[list[dict[str, Any]]]:
    """The onedevice baseline's slice: one device, no attributes, no capacity, allocatable to
    any number of claims at once (so the scheduler has nothing to count or subtract)."""
    return [[{"name": ONE_DEVICE, "allowMultipleAllocations": True}]]


def mode_chunks(machine: Machine, mode: Mode) -> list[list[dict[str, Any]]]:
    """The device documents of every slice of one node in `mode`; nodra publishes none."""
    if mode == "nodra":
        return []
    if mode == "onedevice":
        return one_device_chunks()
    return layout_chunks(machine, mode)


def node_slices(chunks: Sequence[Sequence[dict[str, Any]]], node: str, uid: str) -> list[Any]:
    """The ResourceSlices the dra-plugin of `node` creates on an empty API server: its plan's
    creations, pool and node named after it, owned by its Node object."""
    todo = plan([], chunks, driver=DRIVER_NAME, node=node, pool=node, owner=Owner(node, uid))
    return list(todo.create)


def json_bytes(document: Any) -> int:
    """Size of a document as compact JSON, the way a client sends it."""
    return len(json.dumps(document, separators=(",", ":")).encode())


def claim_size(index: int) -> int:
    """CPUs the `index`-th pod asks for: 1, 4, 16, 32, 1, ..."""
    return CLAIM_SIZES[index % len(CLAIM_SIZES)]


def template_name(cpus: int) -> str:
    return f"cpus-{cpus}"


def claim_template(layout: Layout | Literal["onedevice"], cpus: int) -> dict[str, Any]:
    """A ResourceClaimTemplate for `cpus` CPUs: `cpus` individual devices, that amount of
    `dra.cpu/cpu` from one grouped device, or (onedevice) the node's one device whatever the
    size."""
    exactly: dict[str, Any] = {"deviceClassName": DEVICE_CLASS}
    if layout == "individual":
        exactly.update(allocationMode="ExactCount", count=cpus)
    elif layout == "onedevice":
        exactly.update(allocationMode="ExactCount", count=1)
    else:
        exactly["capacity"] = {"requests": {CPU_CAPACITY: str(cpus)}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": template_name(cpus), "namespace": NAMESPACE},
        "spec": {"spec": {"devices": {"requests": [{"name": "cpus", "exactly": exactly}]}}},
    }


def pod(index: int, mode: Mode = "individual") -> dict[str, Any]:
    """The `index`-th pod: one container holding a claim made from its size's template, or in
    nodra mode asking its size as a plain `cpu` request."""
    if mode == "nodra":
        cpus = str(claim_size(index))
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"pod-{index:05d}", "namespace": NAMESPACE},
            "spec": {
                "terminationGracePeriodSeconds": 0,
                "containers": [
                    {
                        "name": "main",
                        "image": PAUSE_IMAGE,
                        "resources": {"requests": {"cpu": cpus}, "limits": {"cpu": cpus}},
                    }
                ],
            },
        }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"pod-{index:05d}", "namespace": NAMESPACE},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "resourceClaims": [
                {"name": "cpus", "resourceClaimTemplateName": template_name(claim_size(index))}
            ],
            "containers": [
                {
                    "name": "main",
                    "image": PAUSE_IMAGE,
                    "resources": {"claims": [{"name": "cpus"}]},
                }
            ],
        },
    }


def fake_node(name: str) -> dict[str, Any]:
    """A Node object kwok takes for one of its own (by the annotation)."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {FAKE_NODE_ANNOTATION: "fake"},
            "labels": {"kubernetes.io/hostname": name, "type": "kwok"},
        },
    }


def device_class(mode: Mode = "individual") -> dict[str, Any]:
    """The DeviceClass the chart installs for CPU devices; for onedevice the same name matching
    the driver alone (its device has no capacity for the chart's selector to look into)."""
    if mode == "onedevice":
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": DEVICE_CLASS},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER_NAME}"'}}]},
        }
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": DEVICE_CLASS},
        "spec": {
            "selectors": [
                {
                    "cel": {
                        "expression": f'device.driver == "{DRIVER_NAME}" && '
                        f'!("memory" in device.capacity["{DRIVER_NAME}"])'
                    }
                }
            ]
        },
    }


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank percentile (q in 0..100) of `values`; NaN when there are none."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


@dataclass(frozen=True)
class Result:
    """One layout's run."""

    mode: str
    nodes: int
    pods: int
    bound: int
    seconds: float
    pods_per_s: float
    p50_ms: float
    p99_ms: float
    apiserver_cpu_s: float
    scheduler_cpu_s: float
    apiserver_rss_mib: float
    scheduler_rss_mib: float
    slices_per_node: int
    devices_per_node: int
    slice_bytes_per_node: int
    # The scheduler's attempts that placed no pod, unschedulable or failed
    # (scheduler_schedule_attempts_total); -1: not read.
    failed_attempts: int = -1
    # The other processes' CPU seconds over the same window; NaN: not measured.
    controller_manager_cpu_s: float = math.nan
    etcd_cpu_s: float = math.nan
    kwok_cpu_s: float = math.nan
    # Client-side throttling of the scheduler and the controller-manager: their log lines
    # about client-side throttling (THROTTLE_LOG) and their rate limiter's waits longer
    # than THROTTLE_WAIT_S (rest_client_rate_limiter_duration_seconds); -1: not read.
    throttle_log_lines: int = -1
    throttle_waits: int = -1
    # The scheduler's log lines "timed out trying to allocate devices"; -1: not read.
    dra_timeouts: int = -1
    # pods_per_s as a ratio to the baselines at the same node count; NaN: no baseline ran.
    vs_nodra: float = math.nan
    vs_onedevice: float = math.nan
    # Pods created per second (32 requests in flight): no mode binds faster than this.
    created_per_s: float = math.nan
    # The whole machine over the window, every process: the fraction of its cores busy, and the
    # seconds the API server's and the scheduler's threads waited runnable for a CPU.
    machine_busy: float = math.nan
    apiserver_cpu_wait_s: float = math.nan
    scheduler_cpu_wait_s: float = math.nan

    @property
    def throttled(self) -> str:
        """`no` only when both logs and both rate limiters were read and show no wait."""
        return "no" if self.throttle_log_lines == 0 and self.throttle_waits == 0 else "yes"

    def busiest(self) -> tuple[str, float]:
        """The process that spent the most CPU over the window and its cores (CPU s / s)."""
        spent = {
            "kube-apiserver": self.apiserver_cpu_s,
            "kube-scheduler": self.scheduler_cpu_s,
            "kube-controller-manager": self.controller_manager_cpu_s,
            "etcd": self.etcd_cpu_s,
            "kwok": self.kwok_cpu_s,
        }
        name = max(spent, key=lambda k: -1.0 if math.isnan(spent[k]) else spent[k])
        return name, spent[name] / max(self.seconds, 1e-9)

    def line(self) -> str:
        return (
            f"scale: mode={self.mode} nodes={self.nodes} pods={self.pods} "
            f"pods_per_s={self.pods_per_s:.1f} p99_ms={self.p99_ms:.0f} "
            f"vs_nodra={self.vs_nodra:.2f} vs_onedevice={self.vs_onedevice:.2f} "
            f"throttled={self.throttled}"
        )


def with_ratios(results: Sequence[Result]) -> list[Result]:
    """Every result with its pods/s as a ratio to the nodra and onedevice results of the same
    node count (the last of each, should a count run twice)."""
    base: dict[tuple[str, int], float] = {(r.mode, r.nodes): r.pods_per_s for r in results}

    def ratio(r: Result, baseline: str) -> float:
        rate = base.get((baseline, r.nodes), math.nan)
        return r.pods_per_s / rate if rate > 0 else math.nan

    return [
        replace(r, vs_nodra=ratio(r, "nodra"), vs_onedevice=ratio(r, "onedevice")) for r in results
    ]


# client-go's message when its rate limiter held a request: "Waited for ... due to
# client-side throttling" in older releases, "Waited before sending request"
# reason="client-side throttling, ..." in newer ones.
THROTTLE_LOG = "client-side throttling"
DRA_TIMEOUT_LOG = "timed out trying to allocate devices"
# A rate limiter wait longer than this is throttling: client-go itself logs a wait past 1 s at
# the default verbosity. Shorter ones, with the rates raised, are a starved machine running the
# waiting goroutine late (the bucket holds --kube-api-burst requests, far more than a run asks
# for at once, so it cannot run dry): on a 2-core machine at a load of 20, waits of 5 to
# 250 ms were seen.
THROTTLE_WAIT_S = 1.0
_BUCKET = re.compile(
    r"^rest_client_rate_limiter_duration_seconds_bucket\{(?P<labels>[^}]*)\} (?P<value>\S+)$"
)
_LE = re.compile(r'le="(?P<le>[^"]+)"')


def log_lines(text: str, needle: str) -> int:
    """Lines of a log holding `needle`."""
    return sum(1 for line in text.splitlines() if needle in line)


def rate_limiter_waits(metrics: str, over: float = THROTTLE_WAIT_S) -> int:
    """Requests a client's rate limiter held longer than `over` seconds, from the
    rest_client_rate_limiter_duration_seconds histogram of a /metrics text: per series, its
    count less its largest bucket at or under `over`."""
    series: dict[str, dict[float, float]] = {}
    for line in metrics.splitlines():
        match = _BUCKET.match(line)
        if not match:
            continue
        labels = match["labels"]
        le = _LE.search(labels)
        if le is None:
            continue
        key = _LE.sub("", labels)
        series.setdefault(key, {})[float(le["le"])] = float(match["value"])
    waits = 0.0
    for buckets in series.values():
        total = buckets.get(math.inf, max(buckets.values(), default=0.0))
        within = max((v for le, v in buckets.items() if le <= over), default=0.0)
        waits += total - within
    return int(waits)


TABLE_COLUMNS = (
    ("mode", "mode", "{}"),
    ("nodes", "nodes", "{}"),
    ("pods", "pods", "{}"),
    ("bound", "bound", "{}"),
    ("pods/s", "pods_per_s", "{:.1f}"),
    ("created/s", "created_per_s", "{:.1f}"),
    ("machine busy", "machine_busy", "{:.0%}"),
    ("apiserver CPU wait s", "apiserver_cpu_wait_s", "{:.0f}"),
    ("scheduler CPU wait s", "scheduler_cpu_wait_s", "{:.0f}"),
    ("p50 ms", "p50_ms", "{:.0f}"),
    ("p99 ms", "p99_ms", "{:.0f}"),
    ("apiserver CPU s", "apiserver_cpu_s", "{:.1f}"),
    ("scheduler CPU s", "scheduler_cpu_s", "{:.1f}"),
    ("apiserver peak MiB", "apiserver_rss_mib", "{:.0f}"),
    ("scheduler peak MiB", "scheduler_rss_mib", "{:.0f}"),
    ("slices/node", "slices_per_node", "{}"),
    ("devices/node", "devices_per_node", "{}"),
    ("slice bytes/node", "slice_bytes_per_node", "{}"),
    ("failed attempts", "failed_attempts", "{}"),
    ("controller-manager CPU s", "controller_manager_cpu_s", "{:.1f}"),
    ("etcd CPU s", "etcd_cpu_s", "{:.1f}"),
    ("kwok CPU s", "kwok_cpu_s", "{:.1f}"),
    ("DRA timeouts", "dra_timeouts", "{}"),
    ("throttle log lines", "throttle_log_lines", "{}"),
    ("throttle waits", "throttle_waits", "{}"),
    ("vs nodra", "vs_nodra", "{:.2f}"),
    ("vs onedevice", "vs_onedevice", "{:.2f}"),
)


def table(results: Sequence[Result]) -> str:
    """The results as a Markdown table, one row per run."""
    head = "| " + " | ".join(title for title, _, _ in TABLE_COLUMNS) + " |"
    rule = "|" + "---|" * len(TABLE_COLUMNS)
    rows = [
        "| " + " | ".join(fmt.format(getattr(r, key)) for _, key, fmt in TABLE_COLUMNS) + " |"
        for r in results
    ]
    return "\n".join([head, rule, *rows])


# ---- the picture --------------------------------------------------------------------------

COLOURS = {
    "individual": "#d62728",
    "numanode": "#1f77b4",
    "socket": "#2ca02c",
    "nodra": "#7f7f7f",
    "onedevice": "#9467bd",
}
PANEL_W, PANEL_H = 360, 240
MARGIN_L, MARGIN_T, MARGIN_B, GAP = 60, 40, 50, 70


def nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 times a power of ten at or above `value` (1 for nothing)."""
    if not value > 0 or math.isnan(value):
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if step * power >= value:
            return float(step * power)
    return float(10 * power)


def _panel(
    results: Sequence[Result],
    key: str,
    title: str,
    left: float,
    xs: Sequence[int],
    scale: float = 1.0,
) -> list[str]:
    def value_of(r: Result) -> float:
        return float(getattr(r, key)) * scale

    values = [value_of(r) for r in results if not math.isnan(value_of(r))]
    top = nice_ceiling(max(values, default=0.0))
    low_x, high_x = min(xs), max(xs)

    def px(nodes: int) -> float:
        if high_x == low_x:
            return left + PANEL_W / 2
        return left + (nodes - low_x) / (high_x - low_x) * PANEL_W

    def py(value: float) -> float:
        return MARGIN_T + PANEL_H - value / top * PANEL_H

    out = [
        f'<text x="{left + PANEL_W / 2:.1f}" y="{MARGIN_T - 14}" text-anchor="middle" '
        f'font-weight="bold">{escape(title)}</text>',
        f'<rect x="{left}" y="{MARGIN_T}" width="{PANEL_W}" height="{PANEL_H}" '
        'fill="none" stroke="#999"/>',
    ]
    for tick in range(5):
        value = top * tick / 4
        y = py(value)
        out.append(
            f'<line x1="{left - 4}" y1="{y:.1f}" x2="{left + PANEL_W}" y2="{y:.1f}" stroke="#ddd"/>'
        )
        out.append(f'<text x="{left - 8}" y="{y + 4:.1f}" text-anchor="end">{value:g}</text>')
    for nodes in xs:
        x = px(nodes)
        out.append(
            f'<text x="{x:.1f}" y="{MARGIN_T + PANEL_H + 18}" text-anchor="middle">{nodes}</text>'
        )
    out.append(
        f'<text x="{left + PANEL_W / 2:.1f}" y="{MARGIN_T + PANEL_H + 38}" '
        'text-anchor="middle">nodes</text>'
    )
    for mode in dict.fromkeys(r.mode for r in results):
        runs = sorted(
            (r for r in results if r.mode == mode and not math.isnan(value_of(r))),
            key=lambda r: r.nodes,
        )
        colour = COLOURS.get(mode, "#555")
        path = " ".join(f"{px(r.nodes):.1f},{py(value_of(r)):.1f}" for r in runs)
        if len(runs) > 1:
            out.append(
                f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>'
            )
        for r in runs:
            # Hollow: the run ended before every pod was bound.
            fill = colour if r.bound >= r.pods else "white"
            out.append(
                f'<circle cx="{px(r.nodes):.1f}" cy="{py(value_of(r)):.1f}" r="3.5" '
                f'fill="{fill}" stroke="{colour}" stroke-width="1.5"/>'
            )
    return out


def draw_svg(results: Sequence[Result], caption: str = "") -> str:
    """Pods bound per second and p99 scheduling latency against the node count, one line per
    layout, as a standalone SVG document; a hollow point is a run that ended before every pod
    was bound (its p99 is of the bound pods only)."""
    xs = sorted({r.nodes for r in results}) or [0]
    width = MARGIN_L + 2 * PANEL_W + GAP + 20
    height = MARGIN_T + PANEL_H + MARGIN_B + 30
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
    ]
    parts += _panel(results, "pods_per_s", "pods bound per second", MARGIN_L, xs)
    right = MARGIN_L + PANEL_W + GAP
    parts += _panel(results, "p99_ms", "p99 scheduling latency (s)", right, xs, scale=0.001)
    legend_y = height - 26
    x = MARGIN_L
    for mode in dict.fromkeys(r.mode for r in results):
        colour = COLOURS.get(mode, "#555")
        parts.append(
            f'<line x1="{x}" y1="{legend_y - 4}" x2="{x + 24}" y2="{legend_y - 4}" '
            f'stroke="{colour}" stroke-width="2"/>'
        )
        parts.append(f'<text x="{x + 30}" y="{legend_y}">{escape(mode)}</text>')
        x += 120
    if any(r.bound < r.pods for r in results):
        parts.append(
            f'<circle cx="{x + 4}" cy="{legend_y - 4}" r="3.5" fill="white" stroke="#555" '
            'stroke-width="1.5"/>'
        )
        parts.append(f'<text x="{x + 14}" y="{legend_y}">not every pod bound in time</text>')
    if caption:
        parts.append(
            f'<text x="{width - 10}" y="{height - 8}" text-anchor="end" fill="#555">'
            f"{escape(caption)}</text>"
        )
    parts.append("</svg>")
    return "\n".join(parts) + "\n"
