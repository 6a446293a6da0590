"""Shared-pool pushes and claimed-container creation on a real containerd 2.4 + runc node (the
real-node test bed: tests/realnode), every peer genuine, truth read from the kernel.

Measures:
  1. A pool change reaching N running shared containers (N = 10, 50, 120): from the start of
     `dracpu dev claim` / `dev release` (prepare or unprepare through the simulated kubelet)
     until every container's Cpus_allowed_list is the new pool; and the plugin's own push time
     (its "pushed shared pool" log line).
  2. The runtime's own serial cost for the same N updates with no plugin involved: `runc update
     --cpuset-cpus` for each container in turn, and `crictl update` (CRI UpdateContainerResources,
     which the plugin is not subscribed to) for each in turn.
  3. Creating a claimed container through crictl (CDI devices of a prepared claim): `crictl
     create` and `crictl start`, with the plugin (pinned at creation) and with the dracpu
     services stopped (no NRI plugin connected; CDI still injects the env).

Needs root and `tools/tier-realnode.sh bootstrap`; otherwise prints why and exits 0.

.venv/bin/python benchmarks/realnode_bench.py [--sizes 10,50,120] [--changes 8] [--creates 15]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from harness import speed
from harness.containerd_node import RUNC, ContainerdNode, cpus_allowed, missing_tools
from harness.dev_up import DevUp
from harness.realnode_stack import Stack, finish_stack, start_stack
from harness.waits import wait_for

ONLINE = Path("/sys/devices/system/cpu/online").read_text().strip()
PUSH_LINE = re.compile(r'msg="pushed shared pool".* containers=(\d+) .* ms=([0-9.]+)')


def summary(label: str, samples: Sequence[float]) -> str:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return (
        f"{label:<58} n={len(ordered):<4} median={statistics.median(ordered) * 1e3:8.1f} ms"
        f"  p99={p99 * 1e3:8.1f} ms"
    )


def on_pool(pids: Sequence[int], pool: str) -> Callable[[], bool]:
    return lambda: all(cpus_allowed(pid) == pool for pid in pids)


def push_times(dev: DevUp, containers: int) -> list[float]:
    found = []
    for match in PUSH_LINE.finditer(dev.service_log("nri-plugin")):
        if int(match.group(1)) == containers:
            found.append(float(match.group(2)) / 1e3)
    return found


def pool_changes(stack: Stack, size: int, changes: int) -> list[str]:
    node, dev = stack.node, stack.dev
    pod = node.run_pod(f"bench-{size}")
    containers = node.run_containers(pod, [f"b{size}-{n}" for n in range(size)])
    pids = list(node.pids([c.id for c in containers]).values())
    before = len(push_times(dev, size))
    reach: list[float] = []  # from the claim/release command's start
    after: list[float] = []  # from its return (the pool has changed by then)
    for round_ in range(changes // 2):
        for step in ("claim", "release"):
            started = time.perf_counter()
            if step == "claim":
                claim = dev.claim(f"bench-{size}-{round_}")
                pool = dev.shared_pool()
            else:
                dev.release(claim.name)
                pool = ONLINE
            returned = time.perf_counter()
            what = f"{size} containers on the pool {pool}"
            wait_for(on_pool(pids, pool), what, timeout=120, interval=0.005)
            reach.append(time.perf_counter() - started)
            after.append(time.perf_counter() - returned)
    pushes = push_times(dev, size)[before:]
    lines = [
        summary(f"pool change reaching {size} containers, from command start", reach),
        summary(f"pool change reaching {size} containers, after command returned", after),
    ]
    if pushes:
        lines.append(summary(f"  plugin push to {size} containers (its log)", pushes))

    # The runtime's own serial cost, no plugin: runc directly, then CRI through crictl.
    for label, update in (
        ("runc update", lambda cid, cpus: _runc_update(node, cid, cpus)),
        ("crictl update", lambda cid, cpus: node.crictl("update", "--cpuset-cpus", cpus, cid)),
    ):
        totals = []
        for cpus in ("1", ONLINE) * 2:
            started = time.perf_counter()
            for container in containers:
                update(container.id, cpus)
            totals.append(time.perf_counter() - started)
        lines.append(summary(f"  {label} x{size}, serial (no plugin)", totals))
        lines.append(
            f"  {label}: {statistics.median(totals) / size * 1e3:.1f} ms per container (median)"
        )
    node.remove_pod(pod)
    return lines


def _runc_update(node: ContainerdNode, container_id: str, cpus: str) -> None:
    subprocess.run(
        [
            str(RUNC),
            "--root",
            str(node.base / "runc" / "k8s.io"),
            "update",
            "--cpuset-cpus",
            cpus,
            container_id,
        ],
        check=True,
        capture_output=True,
    )


def claimed_creates(stack: Stack, creates: int, with_plugin: bool) -> list[str]:
    node, dev = stack.node, stack.dev
    pod = node.run_pod(f"creates-{int(with_plugin)}")
    claim = dev.claim(f"creates-{int(with_plugin)}")
    if not with_plugin:
        dev.stop()  # no NRI plugin connected; the claim's CDI spec stays on disk
    create, start = [], []
    for _ in range(creates):
        started = time.perf_counter()
        # One name: a claim belongs to one container of the pod (a restart reuses it).
        container = node.create_container(pod, "claimed", cdi_devices=claim.cdi_devices)
        create.append(time.perf_counter() - started)
        started = time.perf_counter()
        node.start_container(container)
        start.append(time.perf_counter() - started)
        if with_plugin:
            assert node.allowed_cpus(container.id) == claim.cpuset
        node.remove_container(container.id)
    node.remove_pod(pod)
    label = "with the plugin" if with_plugin else "no plugin"
    return [
        summary(f"claimed container: crictl create ({label})", create),
        summary(f"claimed container: crictl start ({label})", start),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10,50,120")
    parser.add_argument("--changes", type=int, default=8, help="pool changes per size (even)")
    parser.add_argument("--creates", type=int, default=15)
    args = parser.parse_args()
    reason = "not root" if os.geteuid() != 0 else missing_tools()
    if reason:
        print(f"realnode_bench: skipped: {reason}")
        return 0
    os.environ.setdefault("DRACPU_REALNODE_PREFIX", "dracpu-bench-")
    speed.factor()  # measured once per process: here, rather than inside a timed wait
    stack = start_stack(verbosity=2)
    lines = [f"machine: {os.cpu_count()} CPUs online {ONLINE}; containerd {stack.node.version}"]
    try:
        for size in (int(s) for s in args.sizes.split(",")):
            lines += pool_changes(stack, size, args.changes)
            print("\n".join(lines), flush=True)
            lines = []
        lines += claimed_creates(stack, args.creates, with_plugin=True)
        lines += claimed_creates(stack, args.creates, with_plugin=False)
        print("\n".join(lines), flush=True)
    finally:
        finish_stack(stack)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
