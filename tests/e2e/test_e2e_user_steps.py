"""The five install steps of docs/user/installation.md ("Install on an existing cluster") run
as the page writes them, on the one-node cluster, after the scenarios' uninstall (this module
sorts after theirs): each step's command lines are read from the page and run by bash in a
folder holding the checkout's `helm/` chart and `examples/`, with this cluster's `kubectl` and
`helm` first on PATH; each step's output is held to what the page says it shows.

What the cluster changes, and why:
- step 1 (build and push the images) is the tier's own build of the same five Dockerfile
  targets (tools/tier-docker.sh images): there is no registry to push to here;
- step 2's `<node>` is this cluster's node, which gets the label the page's `nodeSelector` asks
  for;
- `my-values.yaml` holds this cluster's chart settings (tests/harness/cluster.py
  `chart_values`: kubelet root, NRI socket, state dir, local images);
- the example of step 5 is scaled to the node's largest device (2 CPUs here), its pod gets
  `hostNetwork: true` (as every test pod here), and its `busybox:1.36` is the
  cluster's busybox image tagged with that name (no registry either)."""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from harness.cluster import NAMESPACE, RELEASE, ROOT, TEST_IMAGE, Cluster, say, step
from harness.examples import EXAMPLES, Example
from harness.waits import wait_for

from dracpu.core.cpuset import CPUSet
from dracpu.core.driver import NUMA_DEVICE_PREFIX

pytestmark = pytest.mark.e2e

PAGE = ROOT / "docs/user/installation.md"
SECTION = "## Install on an existing cluster"
EXAMPLE = "grouped-numanode"
BUSYBOX = "docker.io/library/busybox:1.36"


def install_steps() -> dict[int, list[str]]:
    """Step number -> the command lines of its `sh` blocks (continuations joined)."""
    text = PAGE.read_text(encoding="utf-8")
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    steps: dict[int, list[str]] = {}
    number = 0
    in_block = False
    pending = ""
    for line in section.splitlines():
        heading = re.match(r"^(\d+)\. \*\*", line)
        if heading and not in_block:
            number = int(heading.group(1))
            steps[number] = []
        elif line.strip() == "```sh":
            in_block = True
        elif line.strip() == "```" and in_block:
            in_block = False
        elif in_block and number:
            pending += line.strip()
            if pending.endswith("\\"):
                pending = pending[:-1] + " "
                continue
            steps[number].append(pending)
            pending = ""
    return steps


def values_file(settings: list[str]) -> dict[str, Any]:
    """`--set a.b=c` pairs as the values document they set."""
    values: dict[str, Any] = {}
    for setting in settings:
        if setting == "--set":
            continue
        key, _, text = setting.partition("=")
        value: Any = {"true": True, "false": False}.get(text, text)
        if isinstance(value, str) and value.isdigit():
            value = int(value)
        *parents, leaf = key.split(".")
        target = values
        for parent in parents:
            target = target.setdefault(parent, {})
        target[leaf] = value
    return values


class Shell:
    """bash in a folder laid out like the checkout, this cluster's tools first on PATH."""

    def __init__(self, node: Cluster, folder: Path) -> None:
        self.folder = folder
        tools = folder / ".bin"
        tools.mkdir()
        (tools / "kubectl").symlink_to(node.kubectl_bin)
        (tools / "helm").symlink_to(node.helm_bin)
        self.env = {
            **os.environ,
            "PATH": f"{tools}:{os.environ['PATH']}",
            "KUBECONFIG": node.kubeconfig,
        }

    def run(self, line: str) -> str:
        with step(line):
            done = subprocess.run(
                ["bash", "-c", line], cwd=self.folder, env=self.env,
                capture_output=True, text=True, timeout=300, check=False,
            )  # fmt: skip
        assert done.returncode == 0, f"{line}: exit {done.returncode}: {done.stderr.strip()}"
        return done.stdout


def pod_ready(node: Cluster, name: str) -> bool:
    conditions = node.get("pod", name).get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def largest_device(node: Cluster) -> int:
    return max(int(d["capacity"]["dra.cpu/cpu"]["value"]) for d in node.published().values())


def test_the_install_steps_run_as_the_page_writes_them(cluster: Cluster) -> None:
    node = cluster
    steps = install_steps()
    assert sorted(steps) == [1, 2, 3, 4, 5], steps
    assert any("docker build" in line and "--target $svc" in line for line in steps[1]), steps[1]
    with step("the release of the scenarios uninstalled"):
        node.helm("uninstall", RELEASE, "-n", NAMESPACE, "--ignore-not-found", "--wait")
        wait_for(lambda: node.driver_pod() is None, "driver pod gone", timeout=120, interval=0.3)
    with tempfile.TemporaryDirectory(prefix="dracpu-steps-") as folder:
        root = Path(folder)
        (root / "helm").symlink_to(ROOT / "helm")
        (root / "examples").mkdir()
        (root / "my-values.yaml").write_text(yaml.safe_dump(values_file(node.chart_values())))
        shell = Shell(node, root)

        label, install = steps[2]
        assert label == "kubectl label node <node> node-role.example.com/exclusive-cpus=true"
        assert "labeled" in shell.run(label.replace("<node>", node.node))
        assert "STATUS: deployed" in shell.run(install)

        (rollout,) = steps[3]
        assert "successfully rolled out" in shell.run(rollout)

        listing, names = steps[4]
        wait_for(node.published, "ResourceSlices published", timeout=120, interval=0.3)
        assert "dra.cpu" in shell.run(listing)
        for row in shell.run(names).splitlines():
            name, count = row.split("\t")
            assert re.fullmatch(rf"{NUMA_DEVICE_PREFIX}[0-9]+", name), row
            assert int(count) >= 1, row

        example = Example(EXAMPLES / f"{EXAMPLE}.yaml")
        scaled = example.scaled(min(example.claimed_cpus(), largest_device(node)))
        scaled.pod["spec"]["hostNetwork"] = True
        (root / "examples" / f"{EXAMPLE}.yaml").write_text(
            yaml.safe_dump_all(scaled.documents, sort_keys=False)
        )
        node.tag_image(TEST_IMAGE, BUSYBOX)
        pod = example.pod["metadata"]["name"]
        apply, ready, logs = steps[5]
        assert f"pod/{pod}" in apply or EXAMPLE in apply, apply
        try:
            shell.run(apply)
            # The page's `kubectl wait` has a fixed timeout; this machine's own budget first.
            wait_for(lambda: pod_ready(node, pod), f"pod {pod} Ready", timeout=180, interval=0.5)
            assert "condition met" in shell.run(ready)
            line = shell.run(logs).strip()
            assert line.startswith("Cpus_allowed_list:"), line
            cpus = CPUSet.parse(line.split(":", 1)[1].strip())
            assert cpus == node.cpus_of(pod, "app"), (line, node.cpus_of(pod, "app"))
            assert len(cpus) == scaled.claimed_cpus(), line
            say(f"step 5: {pod} runs on CPUs {cpus}, as its log says")
        finally:
            shell.run(f"kubectl delete -f examples/{EXAMPLE}.yaml --wait=true")
