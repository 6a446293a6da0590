"""The driver pod's memory on the one-node cluster of tools/cluster.sh: the pod's memory cgroup
(the kernel's own count, what the kubelet reports for the pod) and each container's PSS, idle
and again after N claims were prepared and released through the kubelet.

PSS (from /proc/<pid>/smaps_rollup of each service process, found through the runtime) divides
every shared page among the processes that map it: when the five images share the layer that
holds the Python packages, gRPC's and pydantic's libraries are one file in the page cache,
mapped by five processes, each charged a fifth; with a copy per image each process pays for
its own. The cgroup's figures are the pod cgroup's (the parent of the containers' cgroups):
usage, anonymous memory, page cache, and the working set (usage less inactive file pages)
the kubelet reports.

Needs root and the cluster up (`make cluster-up`, or `DRACPU_E2E_KEEP=1 make e2e`, which also
leaves the chart installed; --install runs helm upgrade --install with the e2e tier's values);
otherwise prints why and exits 0.
Each claim is one ResourceClaim of one CPU and one busybox pod using it, started, then deleted
with its claim; --parallel of them at a time (the node's free CPUs bound it).

Usage: python benchmarks/pod_memory_bench.py [--claims N] [--parallel N] [--settle S]
                                             [--install] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

from harness.cluster import (
    NAMESPACE,
    ROOT,
    SERVICES,
    Cluster,
    claim_manifest,
    cpus_request,
    pod_manifest,
)
from harness.waits import wait_for

MIB = 1024 * 1024
SMAPS_FIELDS = ("Rss", "Pss", "Pss_Anon", "Pss_File", "Private_Dirty", "Shared_Clean")


def smaps_rollup(pid: int) -> dict[str, float]:
    """The process's smaps_rollup fields, in MiB."""
    found: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in SMAPS_FIELDS:
            found[key] = int(rest.split()[0]) * 1024 / MIB
    return found


def pod_cgroup(pid: int) -> tuple[Path, bool]:
    """The memory cgroup folder of the pod the process runs in (its container's parent), and
    whether it is cgroup v2."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            return Path(f"/sys/fs/cgroup/memory{path}").parent, False
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            return Path(f"/sys/fs/cgroup{path}").parent, True
    raise SystemExit(f"pod_memory_bench: /proc/{pid}/cgroup names no memory cgroup")


def cgroup_memory(folder: Path, v2: bool) -> dict[str, float]:
    """usage, anon, file (page cache) and working set of the cgroup, in MiB."""
    stat = {}
    for line in (folder / "memory.stat").read_text().splitlines():
        key, _, value = line.partition(" ")
        stat[key] = int(value)
    if v2:
        usage = int((folder / "memory.current").read_text())
        anon, file, inactive = stat["anon"], stat["file"], stat["inactive_file"]
    else:
        usage = int((folder / "memory.usage_in_bytes").read_text())
        anon, file = stat["total_rss"], stat["total_cache"]
        inactive = stat["total_inactive_file"]
    return {
        "usage": usage / MIB,
        "anon": anon / MIB,
        "file": file / MIB,
        "working_set": max(0, usage - inactive) / MIB,
    }


def measure(cluster: Cluster, pod: dict[str, Any]) -> dict[str, Any]:
    name = pod["metadata"]["name"]
    pids = {s: cluster.container_pid(name, s, NAMESPACE) for s in SERVICES}
    folder, v2 = pod_cgroup(pids["topology"])
    return {
        "cgroup": cgroup_memory(folder, v2),
        "containers": {s: smaps_rollup(pid) for s, pid in pids.items()},
    }


def churn(cluster: Cluster, claims: int, parallel: int) -> float:
    """Prepares and releases `claims` claims; returns the seconds it took."""
    started = time.monotonic()
    done = 0
    while done < claims:
        batch = [f"mem-{i}" for i in range(done, min(claims, done + parallel))]
        for name in batch:
            cluster.apply(claim_manifest(name, [cpus_request(1)]))
            cluster.apply(pod_manifest(name, [("work", ["c"])], [("c", name)]))
        for name in batch:
            wait_for(partial(cluster.running, name), f"pod {name} runs", timeout=120, interval=0.3)
        cluster.delete("pod", *batch)
        cluster.delete("resourceclaim", *batch)
        done += len(batch)
        print(f"  {done}/{claims} claims prepared and released", file=sys.stderr)
    return time.monotonic() - started


def table(results: dict[str, dict[str, Any]]) -> str:
    rows = ["| MiB | " + " | ".join(SERVICES) + " | total |", "|---" * (len(SERVICES) + 2) + "|"]
    for phase, result in results.items():
        for field in ("Pss", "Pss_Anon", "Pss_File", "Rss"):
            values = [result["containers"][s].get(field, 0.0) for s in SERVICES]
            cells = " | ".join(f"{v:.1f}" for v in values)
            rows.append(f"| {field} {phase} | {cells} | {sum(values):.1f} |")
    for phase, result in results.items():
        cgroup = result["cgroup"]
        rows.append(
            f"pod cgroup {phase}: usage {cgroup['usage']:.1f} MiB, anon {cgroup['anon']:.1f},"
            f" page cache {cgroup['file']:.1f}, working set {cgroup['working_set']:.1f}"
        )
    return "\n".join(rows)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--claims", type=int, default=100, help="claims to prepare (default 100)")
    p.add_argument("--parallel", type=int, default=1, help="claims at a time (default 1)")
    p.add_argument("--settle", type=float, default=30, help="seconds idle before measuring")
    p.add_argument("--install", action="store_true", help="helm upgrade --install the chart")
    p.add_argument("--json", type=Path, help="also write the figures here")
    args = p.parse_args()
    status = subprocess.run(
        ["bash", str(ROOT / "tools/cluster.sh"), "status"], capture_output=True, check=False
    )
    if os.geteuid() != 0 or status.returncode != 0:
        reason = "not root" if os.geteuid() != 0 else "the cluster is not up (make cluster-up)"
        print(f"pod_memory_bench: skipped: {reason}")
        return 0
    cluster = Cluster()
    if args.install:
        cluster.install()
    pod = wait_for(cluster.driver_ready, "driver pod Ready", timeout=180, interval=0.3)
    wait_for(lambda: cluster.published(), "ResourceSlice published", timeout=60, interval=0.3)
    time.sleep(args.settle)
    results = {"idle": measure(cluster, pod)}
    if args.claims:
        seconds = churn(cluster, args.claims, args.parallel)
        print(f"{args.claims} claims in {seconds:.0f} s", file=sys.stderr)
        time.sleep(args.settle)
        results[f"after {args.claims} claims"] = measure(cluster, pod)
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
