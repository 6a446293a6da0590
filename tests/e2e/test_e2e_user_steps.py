"""The five install steps of docs/user/installation.md ("Install on an existing cluster") run
as the page writes them, on the one-node cluster, after the scenarios' uninstall (this module
sorts after theirs): each step's command lines are read from the page and run by bash in a
folder holding the release's files (dist/, `make release`) and `examples/`, with this
cluster's `kubectl` and `helm` first on PATH; each step's output is held to what the page says
it shows.

What the cluster changes, and why:
- step 1 checks the release's files and pushes the five archives to a local registry
  (Debian's docker-registry, the CNCF Distribution registry, installed by the e2e tier's
  bootstrap; without it the push is left out, saying so), whose images must be the
  archives' own; the node, which has no route to that registry's loopback address, runs
  the same images loaded from the archives, so step 2's `$REGISTRY` is `localhost`, the
  names they load under;
- step 2's `<node>` is this cluster's node, which gets the label the page's `nodeSelector` asks
  for;
- the page's example version (a release's) is this release's: the archives' version in step 1,
  the packaged chart's name in step 2 (a development version's chart is spelt apart);
- `my-values.yaml` holds this cluster's chart settings (tests/harness/cluster.py
  `chart_values`: kubelet root, NRI socket, state dir, local images);
- the example of step 5 is scaled to the node's largest device (2 CPUs here), its pod gets
  `hostNetwork: true` (as every test pod here), and its `busybox:1.36` is the
  cluster's busybox image tagged with that name (no registry either)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from harness.cluster import NAMESPACE, RELEASE, ROOT, TEST_IMAGE, Cluster, say, step
from harness.examples import EXAMPLES, Example
from harness.release_dist import Dist, push_registry, registry_binary
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

    def run(self, line: str, **env: str) -> str:
        with step(line):
            done = subprocess.run(
                ["bash", "-c", line], cwd=self.folder, env={**self.env, **env},
                capture_output=True, text=True, timeout=300, check=False,
            )  # fmt: skip
        assert done.returncode == 0, f"{line}: exit {done.returncode}: {done.stderr.strip()}"
        return done.stdout


def pod_ready(node: Cluster, name: str) -> bool:
    conditions = node.get("pod", name).get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def largest_device(node: Cluster) -> int:
    return max(int(d["capacity"]["dra.cpu/cpu"]["value"]) for d in node.published().values())


def skopeo(*args: str, env: dict[str, str]) -> str:
    done = subprocess.run(["skopeo", *args], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"skopeo {' '.join(args)}: {done.stderr.strip()}"
    return done.stdout.strip()


def config_digest(reference: str, env: dict[str, str]) -> str:
    """The image's config digest as skopeo reads its manifest: the image itself, whether its
    layers travel compressed (a registry) or not (the archive)."""
    manifest = json.loads(skopeo("inspect", "--raw", reference, env=env))
    return str(manifest["config"]["digest"])


def push_step(shell: Shell, push: str, dist: Dist) -> None:
    """Step 1's push, into a local registry: each image it then serves is the release's
    archive's (the same config), under the name the page gives."""
    binary = registry_binary()
    if binary is None or not shutil.which("skopeo"):
        say("step 1: no local registry (docker-registry) or no skopeo: push not run")
        return
    with push_registry(binary) as registry:
        shell.run(push, REGISTRY=f"{registry.address}/dracpu", **registry.env)
        env = {**shell.env, **registry.env}
        for image in dist.images:
            pushed = f"docker://{registry.address}/dracpu/{image.name.removeprefix('localhost/')}"
            local = f"oci-archive:{image.archive}"
            assert config_digest(pushed, env) == config_digest(local, env), pushed
        say(f"step 1: {len(dist.images)} images pushed to {registry.address}, each the archive's")


def test_the_install_steps_run_as_the_page_writes_them(cluster: Cluster, dist: Dist) -> None:
    node = cluster
    steps = install_steps()
    assert sorted(steps) == [1, 2, 3, 4, 5], steps
    with step("the release of the scenarios uninstalled"):
        node.helm("uninstall", RELEASE, "-n", NAMESPACE, "--ignore-not-found", "--wait")
        wait_for(lambda: node.driver_pod() is None, "driver pod gone", timeout=120, interval=0.3)
    with tempfile.TemporaryDirectory(prefix="dracpu-steps-") as folder:
        root = Path(folder)
        for file in dist.folder.iterdir():
            if not file.name.startswith("."):
                (root / file.name).symlink_to(file)
        (root / "examples").mkdir()
        (root / "my-values.yaml").write_text(yaml.safe_dump(values_file(node.chart_values())))
        shell = Shell(node, root)

        check, push = steps[1]
        label, install = steps[2]
        named = re.search(r"dra-driver-cpu-(\S+)\.tgz", install)
        assert named, install
        push = push.replace(named[1], dist.version)
        install = install.replace(named[0], dist.chart.name)
        assert check == "sha256sum -c SHA256SUMS"
        checked = shell.run(check).splitlines()
        listed = (dist.folder / "SHA256SUMS").read_text().splitlines()
        assert len(checked) == len(listed) and all(c.endswith(": OK") for c in checked), checked
        assert "skopeo copy oci-archive:" in push, push
        push_step(shell, push, dist)

        assert label == "kubectl label node <node> node-role.example.com/exclusive-cpus=true"
        assert "labeled" in shell.run(label.replace("<node>", node.node))
        assert dist.chart.name in install, install
        assert "STATUS: deployed" in shell.run(install, REGISTRY="localhost")
        say(f"step 2: installed the packaged chart {dist.chart.name}")

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
