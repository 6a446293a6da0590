"""The nri-plugin's registration races hunted on real runtimes, many rounds in a row, every verdict
read from the kernel (/proc/<pid>/status Cpus_allowed_list of every running container).

Scenarios (each a round repeated `--rounds` times):
  driver-start      the one-node cluster (tools/cluster.sh): `helm install` of the chart and,
                    at once, a claimed pod and a shared pod; once all run and the bound has
                    passed, no container of the node (the driver pod's five included) may run
                    on the claimed CPU, and the claimed one must run on exactly it; then the
                    pods, the claim and the release removed (`helm uninstall --wait`). With
                    --churn, shared pods of three containers are created and deleted in a
                    loop meanwhile, so that creations are in flight while the nri-plugin
                    registers (reported as scenario driver-start-churn).
  plugin-restart    the real-node bed (tests/realnode): the nri-plugin killed and, once its
                    next process runs, a pod's claimed container created and started while
                    shared containers are created one after another until the plugin has
                    registered and synchronized (harness/race_hunt.py).
  pool-during-sync  the real-node bed: the nri-plugin killed, claims prepared and released in
                    a loop while it comes back and synchronizes, then a claim kept and its
                    container started (harness/race_hunt.py).

The runtime is containerd unless --runtime crio. One line per round and one summary line per
scenario: `race-hunt: scenario=<s> runtime=<r> rounds=<n> clean=<k> violations=<v> adopted=<a>`
(adopted: containers the nri-plugin first heard of at their start, i.e. the race happened).
Needs root and the tiers' bootstrap (tools/real-peers.sh); otherwise prints why and exits 0.

.venv/bin/python benchmarks/registration_race_hunt.py [--runtime crio] [--rounds 20]
    [--scenarios driver-start,plugin-restart,pool-during-sync] [--churn]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import re
import subprocess
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from harness import speed
from harness.cluster import (
    NAMESPACE,
    RELEASE,
    ROOT,
    Cluster,
    claim_cpus,
    claim_manifest,
    cpus_request,
    pod_manifest,
)
from harness.race_hunt import (
    ADOPTED,
    BOUND,
    claimed_pod_during_plugin_restart,
    pool_change_during_sync,
)
from harness.realnode_stack import finish_stack, require_realnode, start_stack
from harness.waits import WaitTimeout, wait_for

from dracpu.core.cpuset import CPUSet

SCENARIOS = ("driver-start", "plugin-restart", "pool-during-sync")


# Its line once such a container is on its cpuset: how long it ran off it, and how it was moved.
SETTLED = "adopted container now on its cpuset"
_FIELDS = re.compile(r'(container|window_s|by)=("[^"]*"|\S+)')


@dataclass(frozen=True)
class Round:
    violations: list[str]
    adopted: int  # containers the nri-plugin adopted at their start during the round
    moves: tuple[str, ...] = ()  # each adopted container's move, from the plugin's log


def moves_in(log: str) -> tuple[str, ...]:
    """`container window_s by` of each adopted container's move the log reports."""
    return tuple(
        " ".join(f"{k}={v}" for k, v in _FIELDS.findall(line))
        for line in log.splitlines()
        if SETTLED in line
    )


def cluster_violations(node: Cluster, claimed_pid: int, claimed: CPUSet) -> list[str]:
    """Every running container of the node, read from the kernel: the claimed one (by its
    process) on exactly `claimed`, every other on none of it."""
    found = []
    for container_id in node.crictl("ps", "-q", "--state", "running").split():
        try:
            info = json.loads(node.crictl("inspect", container_id))
            pid = int(info["info"]["pid"])
            status = Path(f"/proc/{pid}/status").read_text()
        except (OSError, ValueError, KeyError, RuntimeError):
            continue  # gone meanwhile
        line = next(x for x in status.splitlines() if x.startswith("Cpus_allowed_list:"))
        cpus = CPUSet.parse(line.split(":", 1)[1].strip())
        name = info.get("status", {}).get("metadata", {}).get("name", container_id[:13])
        if pid == claimed_pid and cpus != claimed:
            found.append(f"claimed container {name} on {cpus}, not {claimed}")
        elif pid != claimed_pid and cpus & claimed:
            found.append(f"container {name} on {cpus}, claimed CPUs {cpus & claimed}")
    return found


def driver_nri_log(node: Cluster) -> str:
    pod = node.driver_pod()
    if pod is None:
        return ""
    name = pod["metadata"]["name"]
    return str(node.kubectl("logs", "-n", NAMESPACE, name, "-c", "nri-plugin", check=False))


def churn_pods(node: Cluster, prefix: str, stop: threading.Event) -> list[str]:
    """Until `stop`: a shared pod of three containers created every half second, each deleted
    (without waiting) three pods later, so that container creations are in flight while the
    driver starts. The names of every pod it created."""
    made: list[str] = []
    while not stop.is_set():
        name = f"{prefix}-{len(made)}"
        node.apply(pod_manifest(name, [("a", []), ("b", []), ("c", [])]))
        made.append(name)
        if len(made) > 3:
            node.kubectl("delete", "pod", made[-4], "--wait=false", "--ignore-not-found")
        stop.wait(0.5)
    return made


def driver_start_round(node: Cluster, index: int, churn: bool) -> Round:
    claim, claimed_pod, shared_pod = (
        f"hunt-{index}",
        f"hunt-claimed-{index}",
        f"hunt-shared-{index}",
    )
    stop = threading.Event()
    churned: list[str] = []
    with ThreadPoolExecutor(max_workers=1) as pool:
        try:
            node.install()
            churning = pool.submit(churn_pods, node, f"hunt-churn-{index}", stop) if churn else None
            node.apply(claim_manifest(claim, [cpus_request(1)]))
            node.apply(pod_manifest(claimed_pod, [("work", ["c"])], [("c", claim)]))
            node.apply(pod_manifest(shared_pod, [("work", [])]))
            wait_for(node.driver_ready, "the driver pod Ready", timeout=180, interval=0.3)
            wait_for(
                lambda: node.running(claimed_pod) and node.running(shared_pod),
                "both pods Running",
                timeout=180,
                interval=0.3,
            )
            stop.set()
            churned = churning.result() if churning is not None else []
            claimed = claim_cpus(node.env_of(claimed_pod, "work"))
            pid = node.container_pid(claimed_pod, "work")
            with contextlib.suppress(WaitTimeout):
                wait_for(
                    lambda: not cluster_violations(node, pid, claimed),
                    "the kernel view",
                    timeout=BOUND,
                )
            log = driver_nri_log(node)
            return Round(cluster_violations(node, pid, claimed), log.count(ADOPTED), moves_in(log))
        finally:
            stop.set()
            node.delete("pod", claimed_pod, shared_pod, *churned)
            node.delete("resourceclaim", claim)
            node.helm("uninstall", RELEASE, "-n", NAMESPACE, "--ignore-not-found", "--wait")
            wait_for(lambda: node.driver_pod() is None, "the driver pod gone", timeout=180)


def hunt(name: str, runtime: str, rounds: int, one: Callable[[int], Round]) -> int:
    clean = violations = adopted = 0
    for index in range(1, rounds + 1):
        started = time.monotonic()
        found = one(index)
        clean += not found.violations
        violations += len(found.violations)
        adopted += found.adopted
        print(
            f"race-hunt: scenario={name} runtime={runtime} round={index} "
            f"violations={len(found.violations)} adopted={found.adopted} "
            f"took_s={time.monotonic() - started:.1f}"
            + "".join(f"\n    {line}" for line in found.violations)
            + "".join(f"\n    moved: {line}" for line in found.moves),
            flush=True,
        )
    print(
        f"race-hunt: scenario={name} runtime={runtime} rounds={rounds} clean={clean} "
        f"violations={violations} adopted={adopted}",
        flush=True,
    )
    return violations


def run_cluster(runtime: str, rounds: int, churn: bool) -> int:
    cluster_sh = ["bash", str(ROOT / "tools/cluster.sh")]
    missing = subprocess.run([*cluster_sh, "missing"], capture_output=True, text=True).stdout
    if missing.strip():
        print(f"race-hunt: scenario=driver-start skipped: {missing.strip()}")
        return 0
    up = subprocess.run([*cluster_sh, "up"], capture_output=True, text=True)
    try:
        if up.returncode != 0:
            raise SystemExit(f"race-hunt: tools/cluster.sh up failed: {up.stderr.strip()}")
        node = Cluster()
        name = "driver-start-churn" if churn else "driver-start"
        return hunt(name, runtime, rounds, lambda i: driver_start_round(node, i, churn))
    finally:
        subprocess.run([*cluster_sh, "down"], capture_output=True, check=False)


def run_realnode(scenarios: list[str], runtime: str, rounds: int) -> int:
    os.environ.setdefault("DRACPU_REALNODE_PREFIX", "dracpu-hunt-")
    stack = start_stack(verbosity=2)
    rounds_of: dict[str, Callable[[str], list[str]]] = {
        "plugin-restart": lambda name: claimed_pod_during_plugin_restart(stack, name),
        "pool-during-sync": lambda name: pool_change_during_sync(stack, name),
    }

    def counted(scenario: str, index: int) -> Round:
        before = stack.dev.service_log("nri-plugin")
        found = rounds_of[scenario](f"{scenario}-{index}")
        added = stack.dev.service_log("nri-plugin")[len(before) :]
        return Round(found, added.count(ADOPTED), moves_in(added))

    try:
        return sum(
            hunt(name, runtime, rounds, functools.partial(counted, name))
            for name in rounds_of
            if name in scenarios
        )
    finally:
        finish_stack(stack)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runtime", choices=("containerd", "crio"), default="containerd")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument(
        "--churn",
        action="store_true",
        help="driver-start: shared pods created and deleted in a loop while the driver starts",
    )
    args = parser.parse_args()
    scenarios = [s for s in args.scenarios.split(",") if s]
    unknown = sorted(set(scenarios) - set(SCENARIOS))
    if unknown:
        parser.error(f"unknown scenario {', '.join(unknown)}; known: {', '.join(SCENARIOS)}")
    if os.geteuid() != 0:
        print("race-hunt: skipped: not root")
        return 0
    os.environ["DRACPU_RUNTIME"] = args.runtime
    speed.factor()  # measured once, before any timed wait
    total = 0
    if {"plugin-restart", "pool-during-sync"} & set(scenarios):
        try:
            require_realnode()
        except BaseException as exc:  # pytest's skip: the bed cannot run here
            print(f"race-hunt: real-node scenarios skipped: {exc}")
        else:
            total += run_realnode(scenarios, args.runtime, args.rounds)
    if "driver-start" in scenarios:
        total += run_cluster(args.runtime, args.rounds, args.churn)
    return 1 if total else 0


if __name__ == "__main__":
    raise SystemExit(main())
