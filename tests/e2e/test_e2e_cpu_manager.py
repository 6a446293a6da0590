"""A node whose kubelet runs the static CPU Manager, on the one-node cluster: its kubelet is
started with `--cpu-manager-policy=static --reserved-cpus=0` (DRACPU_CLUSTER_KUBELET_FLAGS of
tools/cluster.sh), the chart installed on it publishes nothing and says why in the dra-plugin's
log, the api's /v1/health and an Event on its pod; then the steps of docs/user/installation.md
("Moving a node off the CPU Manager") run as the page writes them, and the driver publishes.

The page's commands run in bash as written, with this cluster's stand-ins: `<node>` is this
node, `/var/lib/kubelet` its kubelet root, `systemctl stop|start kubelet` is
`tools/cluster.sh kubelet-stop|kubelet-start`, and the configuration change of step 3 is the
kubelet started again without the two flags (its configuration file says `none`)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from harness.cluster import NAMESPACE, RELEASE, ROOT, Cluster, say, step
from harness.page_steps import numbered_steps, run_step
from harness.waits import never, wait_for

from dracpu.core.prerequisites import CPU_MANAGER

pytestmark = pytest.mark.e2e

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


def kubelet_restart(flags: str) -> None:
    """The kubelet of the cluster started again with `flags` (tools/cluster.sh up)."""
    env = {**os.environ, "DRACPU_CLUSTER_KUBELET_FLAGS": flags}
    done = subprocess.run(["bash", str(ROOT / "tools/cluster.sh"), "up"], env=env,
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == 0, f"tools/cluster.sh up: {done.stderr.strip()}"


def checkpoint_policy(node: Cluster, name: str) -> str | None:
    """The policy the kubelet recorded in its checkpoint, read from the node's disk."""
    try:
        return str(json.loads((Path(node.kubelet_root) / name).read_text())["policyName"])
    except FileNotFoundError:
        return None


@pytest.fixture(scope="module")
def static_node(cluster: Cluster) -> Iterator[Cluster]:
    """The cluster without the driver, its kubelet on the static CPU Manager; afterwards the
    kubelet as the other modules expect it (no extra flags, policy none)."""
    with step("the release removed"):
        cluster.helm("uninstall", RELEASE, "-n", NAMESPACE, "--ignore-not-found", "--wait")
        wait_for(lambda: cluster.driver_pod() is None, "driver pod gone", timeout=120,
                 interval=0.3)  # fmt: skip
    try:
        with step(f"kubelet restarted with {STATIC}"):
            kubelet_restart(STATIC)
        yield cluster
    finally:
        with step("kubelet as the other modules expect it"):
            kubelet_restart("")


def health(node: Cluster, pod: str) -> dict[str, Any]:
    with node.port_forward(f"pod/{pod}", node.api_port, NAMESPACE) as local:
        reply = httpx.get(f"http://127.0.0.1:{local}/v1/health", timeout=30)
        reply.raise_for_status()
        found: dict[str, Any] = reply.json()
        return found


def cpu_verdict(node: Cluster, pod: str) -> dict[str, Any] | None:
    for verdict in health(node, pod)["prerequisites"]:
        if verdict["name"] == CPU_MANAGER:
            return dict(verdict)
    return None


def restarts(pod: dict[str, Any]) -> dict[str, int]:
    return {s["name"]: s["restartCount"] for s in pod["status"]["containerStatuses"]}


def test_the_page_steps_are_the_ones_run_here() -> None:
    assert [title for title, _ in numbered_steps(PAGE, SECTION)] == STEPS


def test_a_static_kubelet_gets_no_slices_until_moved_off_as_the_page_says(
    static_node: Cluster,
) -> None:
    node = static_node
    assert checkpoint_policy(node, "cpu_manager_state") == "static"  # the kubelet's own record
    with step("helm install on the static node"):
        node.install()
        pod = wait_for(node.driver_ready, "driver pod Ready", timeout=180, interval=0.3)
    name = pod["metadata"]["name"]

    def held_back() -> dict[str, Any] | None:
        verdict = cpu_verdict(node, name)
        return verdict if verdict is not None and not verdict["ok"] else None

    with step("nothing published, the reason in /v1/health"):
        asyncio.run(never(node.slices, "a ResourceSlice published while the kubelet is static",
                          until=held_back, within=120, interval=0.5))  # fmt: skip
    verdict = held_back()
    assert verdict is not None and verdict["service"] == "dra-plugin"
    message = verdict["message"]
    say(f"/v1/health: {CPU_MANAGER}: {message}")
    for words in ("policy static (cpuManagerPolicy", "drain the node", "uncordon the node",
                  f"{node.kubelet_root}/cpu_manager_state"):  # fmt: skip
        assert words in message

    def warning() -> dict[str, Any] | None:
        events = node.events_of(name, NAMESPACE)
        found = [e for e in events if e["reason"] == "PrerequisiteMissing"]
        found = [e for e in found if CPU_MANAGER in e["message"]]
        return found[0] if found else None

    event = wait_for(warning, "the Warning Event on the driver's pod", timeout=60, interval=0.5)
    assert event["type"] == "Warning" and message in event["message"]
    log = node.kubectl("logs", "-n", NAMESPACE, name, "-c", "dra-plugin")
    lines = [x for x in log.splitlines() if "prerequisite missing" in x and CPU_MANAGER in x]
    assert len(lines) == 1, lines
    before = restarts(pod)

    kubectl_dir = str(Path(node.kubectl_bin).parent)
    env = {**os.environ, "PATH": f"{kubectl_dir}:{os.environ['PATH']}",
           "KUBECONFIG": node.kubeconfig}  # fmt: skip
    # This cluster's kubelet is no systemd unit; its configuration file says `none` and the
    # static policy comes from flags: starting it without them is step 3's change.
    preamble = (
        f'cluster() {{ bash {ROOT}/tools/cluster.sh "$@"; }}\n'
        "systemctl() { case \"$*\" in 'stop kubelet') cluster kubelet-stop ;;\n"
        "  'start kubelet') DRACPU_CLUSTER_KUBELET_FLAGS= cluster kubelet-start ;;\n"
        '  *) echo "systemctl $*: not on this cluster" >&2; return 2 ;; esac; }'
    )
    paths = {"<node>": node.node, "/var/lib/kubelet": node.kubelet_root}
    for title, commands in numbered_steps(PAGE, SECTION):
        with step(f"page step: {title}"):
            run_step(commands, env=env, substitutions=paths, preamble=preamble)
        if title == "Remove the checkpoints":
            assert checkpoint_policy(node, "cpu_manager_state") is None
    assert checkpoint_policy(node, "cpu_manager_state") == "none"
    assert not node.get("node", node.node, namespace="")["spec"].get("unschedulable")

    with step("published once the kubelet runs none"):
        wait_for(node.published, "ResourceSlices published", timeout=120, interval=0.5)
    met = wait_for(lambda: (v := cpu_verdict(node, name)) is not None and v["ok"] and v,
                   "the verdict met in /v1/health", timeout=60, interval=0.5)  # fmt: skip
    say(f"/v1/health after: {CPU_MANAGER}: {met['message']}")
    wait_for(
        lambda: any(e["reason"] == "PrerequisiteMet" and CPU_MANAGER in e["message"]
                    for e in node.events_of(name, NAMESPACE)),
        "the Normal Event on the driver's pod", timeout=60, interval=0.5,
    )  # fmt: skip
    after = node.driver_pod()
    assert after is not None and after["metadata"]["name"] == name
    assert restarts(after) == before  # the same pod, no container restarted
