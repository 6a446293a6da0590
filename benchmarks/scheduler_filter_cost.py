"""What kube-scheduler's DRA allocator costs per node and per pod for each device layout, on a
simulated cluster with no API server: the allocator package the scheduler links, at its
release, run by benchmarks/filtercost (Go) the way the scheduler runs it for each pod
(PreFilter: the allocated state cloned and an allocator made over every slice; Filter: Allocate
on node after node until the scheduler's number of feasible nodes is found; the pod placed on
one of them and its allocation recorded). Single-threaded, so it measures the work and not the
machine's parallelism, and no rate limiter, API server or kwok takes part: the figure that
benchmarks/scheduler_scale_bench.py cannot separate from the machine's noise.

Every node is the scale benchmark's machine (harness.scale: 256 CPUs, 4 NUMA nodes) with the
slices the dra-plugin publishes for it, the DeviceClass the chart installs and the scale
benchmark's claims of 1, 4, 16 and 32 CPUs in turn; `onedevice` is its baseline (one shared
device per node with nothing to count). Prints per mode

  filter: mode=<m> nodes=<n> pods=<p> placed=<k> allocate_us_p50=<x> allocate_us_p99=<y>
          pod_ms_p50=<x> pod_ms_p99=<y> prefilter_ms_p50=<x> cpu_ms_per_pod=<c>
          vs_onedevice=<r>

in CPU time (each Allocate call and each pod's PreFilter and Filter on the program's one
thread; cpu_ms_per_pod the whole process's, its garbage collector included, over the mode's
pods), so another load on the machine does not move them much. vs_onedevice is the baseline's
cpu_ms_per_pod over the mode's (below 1: dearer than the baseline), the scheduler's work per
pod that the scale benchmark's pods per second follow where the scheduling cycle sets the
pace.

Builds the Go program inside the wrapper module tools/build-kubernetes.sh made for the
release (the scheduler's exact dependencies), into $DRACPU_CACHE/filtercost-<release>-<hash>.

Usage: python benchmarks/scheduler_filter_cost.py [--nodes 500] [--pods 2000]
           [--modes onedevice,numanode,socket] [--what-if] [--seed 1] [--json]
DRACPU_KUBE_VERSION picks the release (default the newest tested).
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.kubernetes_versions import Release, selected
from harness.paths import CACHE
from harness.scale import (
    BASELINES,
    CLAIM_SIZES,
    MODES,
    Mode,
    claim_template,
    device_class,
    discover_machine,
    mode_chunks,
    node_slices,
)

from dracpu.core.driver import DRIVER_NAME

REPO = Path(__file__).resolve().parents[1]
SOURCE = REPO / "benchmarks" / "filtercost" / "main.go"
NODE = "__NODE__"
BASELINE: Mode = "onedevice"


class FilterCostError(Exception):
    """The benchmark cannot run; the message says why in one line."""


def go() -> str:
    """The Go toolchain, looked for as tools/lib.sh does: on PATH, then in /usr/local/go/bin."""
    found = shutil.which("go", path=f"{os.environ.get('PATH', '')}:/usr/local/go/bin")
    if not found:
        raise FilterCostError("no Go toolchain (go on PATH or /usr/local/go/bin/go)")
    return found


def build(release: Release) -> Path:
    """The filtercost binary for `release`, built once per release and source."""
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:12]
    binary = CACHE / f"filtercost-{release.version}-{digest}" / "filtercost"
    if binary.exists():
        return binary
    module = CACHE / f"kubernetes-{release.version}" / "module"
    if not (module / "go.mod").exists():
        raise FilterCostError(
            f"no wrapper module in {module}: "
            f"KUBE_VERSION={release.version} tools/build-kubernetes.sh makes it"
        )
    package = module / "cmd" / "dracpu-filtercost"
    package.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(SOURCE, package / "main.go")
    binary.parent.mkdir(parents=True, exist_ok=True)
    print(f"filter: building {SOURCE.relative_to(REPO)} against {release.version}", file=sys.stderr)
    env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-buildvcs=false"}
    done = subprocess.run(
        [go(), "build", "-trimpath", "-o", str(binary), "./cmd/dracpu-filtercost"],
        cwd=module,
        env=env,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise FilterCostError(f"go build of the filtercost program failed: {last}")
    for stale in CACHE.glob(f"filtercost-{release.version}-*"):  # builds of older sources
        if stale != binary.parent:
            shutil.rmtree(stale, ignore_errors=True)
    return binary


def mode_input(machine: Any, mode: Mode) -> dict[str, Any]:
    """One mode's slices (the node spelled NODE), DeviceClass and claims in the order pods
    take them."""
    if mode == "nodra":
        raise FilterCostError("nodra publishes no devices: the scheduler's DRA filter does nothing")
    slices = node_slices(mode_chunks(machine, mode), NODE, f"uid-{NODE}")
    claims = [claim_template(mode, cpus)["spec"]["spec"] for cpus in CLAIM_SIZES]
    return {"name": mode, "slices": slices, "classes": [device_class(mode)], "claims": claims}


def what_ifs(layout: dict[str, Any]) -> list[dict[str, Any]]:
    """A layout as it would cost with less for the scheduler to evaluate per device: the class
    selecting on the driver alone (`+driver-selector`), and also every device attribute gone
    (`+no-attributes`). Neither is what the driver publishes; they bound what changing the
    slices' content could win."""
    driver_only = copy.deepcopy(layout)
    driver_only["name"] = f"{layout['name']}+driver-selector"
    for selector in driver_only["classes"][0]["spec"]["selectors"]:
        selector["cel"]["expression"] = f'device.driver == "{DRIVER_NAME}"'
    bare = copy.deepcopy(driver_only)
    bare["name"] = f"{layout['name']}+no-attributes"
    for slice_ in bare["slices"]:
        for device in slice_["spec"]["devices"]:
            device.pop("attributes", None)
    return [driver_only, bare]


def ratio(baseline: float, value: float) -> float:
    return baseline / value if value else math.nan


def report(results: Sequence[dict[str, Any]]) -> list[str]:
    base = next((r for r in results if r["mode"] == BASELINE), None)
    lines = []
    for r in results:
        per_pod = r["process_cpu_ms_per_pod"]
        vs = ratio(base["process_cpu_ms_per_pod"], per_pod) if base else math.nan
        fields = {
            "mode": r["mode"],
            "nodes": r["nodes"],
            "pods": r["pods"],
            "placed": r["placed"],
            "allocate_us_p50": f"{r['allocate_us']['p50']:.1f}",
            "allocate_us_p99": f"{r['allocate_us']['p99']:.1f}",
            "pod_ms_p50": f"{r['pod_filter_us']['p50'] / 1e3:.2f}",
            "pod_ms_p99": f"{r['pod_filter_us']['p99'] / 1e3:.2f}",
            "prefilter_ms_p50": f"{r['prefilter_us']['p50'] / 1e3:.2f}",
            "cpu_ms_per_pod": f"{per_pod:.2f}",
            "vs_onedevice": f"{vs:.2f}",
        }
        lines.append("filter: " + " ".join(f"{k}={v}" for k, v in fields.items()))
    return lines


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="scheduler_filter_cost.py", description=(__doc__ or "").splitlines()[0]
    )
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--modes", default="onedevice,numanode,socket")
    parser.add_argument(
        "--seed", type=int, default=1, help="the random choice among feasible nodes"
    )
    parser.add_argument(
        "--what-if",
        action="store_true",
        help="also each layout with a driver-only class selector, and with no attributes",
    )
    parser.add_argument("--json", action="store_true", help="also print each mode's raw JSON line")
    args = parser.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        parser.error(
            f"--modes: {', '.join(unknown) or 'none given'}; choose among {', '.join(MODES)}"
        )
    if args.nodes <= 0 or args.pods <= 0:
        parser.error("--nodes and --pods must be positive")
    args.modes = modes
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        release = selected()
        binary = build(release)
        machine = discover_machine()
        modes: list[dict[str, Any]] = []
        for mode in args.modes:
            modes.append(mode_input(machine, mode))
            if args.what_if and mode not in BASELINES:
                modes.extend(what_ifs(modes[-1]))
        document = {
            "nodes": args.nodes,
            "pods": args.pods,
            "seed": args.seed,
            "gates": release.gates,
            "modes": modes,
        }
    except (FilterCostError, ValueError) as exc:
        print(f"scheduler_filter_cost.py: error: {exc}", file=sys.stderr)
        return 2
    done = subprocess.run([str(binary)], input=json.dumps(document), capture_output=True, text=True)
    results = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    for r in results:
        if args.json:
            print(json.dumps(r))
        if r.get("error"):
            print(f"filter: mode={r['mode']} error: {r['error']}", file=sys.stderr)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no message)"])[-1]
        if not results:
            print(f"scheduler_filter_cost.py: error: {last}", file=sys.stderr)
        return 1
    print("\n".join(report(results)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
