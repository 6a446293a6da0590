"""A kubelet on the static CPU Manager and the way off it, as docs/user/installation.md ("Moving
a node off the CPU Manager") writes it, on a node of tools/cluster.sh: the kubelet started
again with extra flags (DRACPU_CLUSTER_KUBELET_FLAGS), the policy it recorded read from its
checkpoint, the driver's verdict read from its api's /v1/health, and the page's steps run in
bash with this cluster's stand-ins (`<node>` is the node, `/var/lib/kubelet` its kubelet root,
`systemctl stop|start kubelet` is `tools/cluster.sh kubelet-stop|kubelet-start`, and step 3's
change of configuration is the kubelet started again without the extra flags: its
configuration file says `none`)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from dracpu.core.prerequisites import CPU_MANAGER
from harness.cluster import NAMESPACE, ROOT, Cluster, say, step
from harness.page_steps import numbered_steps, run_step
from harness.speed import budget
from harness.waits import wait_for

PAGE = ROOT / "docs/user/installation.md"
SECTION = "## Moving a node off the CPU Manager"
STATIC = "--cpu-manager-policy=static --reserved-cpus=0"
STEPS = [
    "Drain the node",
    "Stop the kubelet",
    "Set the policy to none",
    "Remove the checkpoints",
    "Start the kubelet",
    "Uncordon the node",
]
# The page's `systemctl` on a node of tools/cluster.sh, whose kubelet is no systemd unit.
PREAMBLE = (
    f'cluster() {{ bash {ROOT}/tools/cluster.sh "$@"; }}\n'
    "systemctl() { case \"$*\" in 'stop kubelet') cluster kubelet-stop ;;\n"
    "  'start kubelet') DRACPU_CLUSTER_KUBELET_FLAGS= cluster kubelet-start ;;\n"
    '  *) echo "systemctl $*: not on this cluster" >&2; return 2 ;; esac; }'
)


def kubelet_restart(flags: str) -> None:
    """The kubelet of tools/cluster.sh's node (its settings from the environment) started again
    with `flags`; tools/cluster.sh removes its checkpoints when the flags change."""
    env = {**os.environ, "DRACPU_CLUSTER_KUBELET_FLAGS": flags}
    done = subprocess.run(["bash", str(ROOT / "tools/cluster.sh"), "up"], env=env,
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == 0, f"tools/cluster.sh up: {done.stderr.strip()}"


@contextmanager
def static_kubelet(node: str) -> Iterator[None]:
    """`node`'s kubelet on the static CPU Manager for the block; afterwards as the other
    modules expect it (no extra flags, policy none), whatever the block did."""
    try:
        with step(f"{node}: the kubelet restarted with {STATIC}"):
            kubelet_restart(STATIC)
        yield
    finally:
        with step(f"{node}: the kubelet as the other modules expect it"):
            kubelet_restart("")


def checkpoint_policy(kubelet_root: str, name: str = "cpu_manager_state") -> str | None:
    """The policy the kubelet recorded in its checkpoint, read from the node's disk."""
    try:
        return str(json.loads((Path(kubelet_root) / name).read_text())["policyName"])
    except FileNotFoundError:
        return None


def recorded_policy(kubelet_root: str, policy: str) -> str:
    """`policy` once the kubelet has recorded it in its CPU Manager checkpoint: a kubelet just
    started answers its health check, and its node is still Ready from before, a moment before
    its CPU Manager starts and writes the checkpoint."""
    found: str = wait_for(
        lambda: checkpoint_policy(kubelet_root) == policy and policy,
        f"the kubelet's checkpoint recording policy {policy}",
        timeout=budget(60),
        interval=0.2,
    )
    return found


def health(node: Cluster, pod: str) -> dict[str, Any]:
    """The driver pod's /v1/health, through a port-forward to its api."""
    with node.port_forward(f"pod/{pod}", node.api_port, NAMESPACE) as local:
        reply = httpx.get(f"http://127.0.0.1:{local}/v1/health", timeout=30)
        reply.raise_for_status()
        found: dict[str, Any] = reply.json()
        return found


def cpu_verdict(node: Cluster, pod: str) -> dict[str, Any] | None:
    """The driver's verdict on the CPU Manager prerequisite, from `pod`'s /v1/health."""
    for verdict in health(node, pod)["prerequisites"]:
        if verdict["name"] == CPU_MANAGER:
            return dict(verdict)
    return None


def restarts(pod: dict[str, Any]) -> dict[str, int]:
    return {s["name"]: s["restartCount"] for s in pod["status"]["containerStatuses"]}


def held_back(node: Cluster, pod: str) -> dict[str, Any] | None:
    """The verdict, when it holds the node back."""
    verdict = cpu_verdict(node, pod)
    return verdict if verdict is not None and not verdict["ok"] else None


def assert_said_held_back(node: Cluster, pod: str) -> str:
    """The driver in `pod` holds `node` back and says so in one line naming the setting, the
    checkpoint and the steps: in /v1/health (the dra-plugin's verdict), a Warning Event on its
    pod and one line of its log. The line."""
    verdict = held_back(node, pod)
    assert verdict is not None and verdict["service"] == "dra-plugin", verdict
    message = str(verdict["message"])
    say(f"/v1/health: {CPU_MANAGER}: {message}")
    for words in ("policy static (cpuManagerPolicy", "drain the node", "uncordon the node",
                  f"{node.kubelet_root}/cpu_manager_state"):  # fmt: skip
        assert words in message, message

    def warning() -> dict[str, Any] | None:
        events = node.events_of(pod, NAMESPACE)
        found = [e for e in events if e["reason"] == "PrerequisiteMissing"]
        found = [e for e in found if CPU_MANAGER in e["message"]]
        return found[0] if found else None

    event = wait_for(warning, "the Warning Event on the driver's pod", timeout=60, interval=0.5)
    assert event["type"] == "Warning" and message in event["message"]
    log = node.kubectl("logs", "-n", NAMESPACE, pod, "-c", "dra-plugin")
    lines = [x for x in log.splitlines() if "prerequisite missing" in x and CPU_MANAGER in x]
    assert len(lines) == 1, lines
    return message


def assert_said_met(node: Cluster, pod: str) -> None:
    """The verdict met again in /v1/health, and a Normal Event on the driver's pod."""
    met = wait_for(lambda: (v := cpu_verdict(node, pod)) is not None and v["ok"] and v,
                   "the verdict met in /v1/health", timeout=60, interval=0.5)  # fmt: skip
    say(f"/v1/health after: {CPU_MANAGER}: {met['message']}")
    wait_for(
        lambda: any(e["reason"] == "PrerequisiteMet" and CPU_MANAGER in e["message"]
                    for e in node.events_of(pod, NAMESPACE)),
        "the Normal Event on the driver's pod", timeout=60, interval=0.5,
    )  # fmt: skip


def move_off(node: Cluster) -> None:
    """The page's steps run on `node`, each as written: the kubelet's checkpoint gone once
    they are removed, its policy `none` and the node schedulable at the end."""
    kubectl_dir = str(Path(node.kubectl_bin).parent)
    env = {**os.environ, "PATH": f"{kubectl_dir}:{os.environ['PATH']}",
           "KUBECONFIG": node.kubeconfig}  # fmt: skip
    paths = {"<node>": node.node, "/var/lib/kubelet": node.kubelet_root}
    for title, commands in numbered_steps(PAGE, SECTION):
        with step(f"page step: {title}"):
            run_step(commands, env=env, substitutions=paths, preamble=PREAMBLE)
        if title == "Remove the checkpoints":
            assert checkpoint_policy(node.kubelet_root) is None
    recorded_policy(node.kubelet_root, "none")
    assert not node.get("node", node.node, namespace="")["spec"].get("unschedulable")
