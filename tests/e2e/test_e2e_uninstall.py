"""The "Uninstall" section of docs/user/installation.md run as the page writes it, on the
one-node cluster, with a claimed pod running: the chart's pre-delete check refuses and names
the pod, `--no-hooks` uninstalls anyway and the pod keeps its CPUs (read from the kernel), the
chart installed again finds it where it was, and once the pod is gone the check lets the
uninstall through and the page's command removes what the driver left on the node.

The page's commands run in bash as written, with this cluster's `helm` and `kubectl` first on
PATH and its paths for the page's defaults: `/var/lib/kubelet` is its kubelet root,
`/var/lib/dracpu` its state dir (`/var/run/cdi` is the host's own). The re-install is the
cluster's own install (the page points at the install section for it)."""

from __future__ import annotations

from pathlib import Path

import pytest
from e2e.scenarios import start_pod
from harness.cluster import (
    NAMESPACE,
    RELEASE,
    ROOT,
    Cluster,
    claim_cpus,
    claim_manifest,
    cpus_request,
    pod_manifest,
    say,
    step,
)
from harness.page_steps import Section, numbered_steps
from harness.waits import wait_for

pytestmark = pytest.mark.e2e

PAGE = ROOT / "docs/user/installation.md"
STEPS = [
    "Uninstall the release",
    "If the check refused, read which pods hold claims",
    "Or uninstall with those pods running",
    "Remove what is left on the node",
]
CDI = Path("/var/run/cdi")
HOOK_LABEL = "app.kubernetes.io/component=uninstall-check"


def test_the_page_steps_are_the_ones_run_here() -> None:
    assert [title for title, _ in numbered_steps(PAGE, "## Uninstall")] == STEPS


def test_uninstall_with_a_claimed_pod_as_the_page_says(cluster: Cluster) -> None:
    node = cluster
    paths = {"/var/lib/kubelet": node.kubelet_root, "/var/lib/dracpu": str(node.state_dir)}
    page = Section(PAGE, "## Uninstall", node, paths).run

    with step("the chart installed, a claimed pod running"):
        node.install()
        wait_for(node.driver_ready, "driver pod Ready", timeout=180, interval=0.3)
        wait_for(node.published, "ResourceSlices published", timeout=120, interval=0.3)
        node.apply(claim_manifest("web-cpus", [cpus_request(1)]))
        start_pod(node, "web", pod_manifest("web", [("work", ["c"])], [("c", "web-cpus")]))
    pinned = node.cpus_of("web", "work")
    assert pinned == claim_cpus(node.env_of("web", "work"))
    uid = node.get("resourceclaim", "web-cpus")["metadata"]["uid"]
    record = node.state_dir / "claims" / f"{uid}.json"
    spec = CDI / f"dra.k8s.io-cpu_claim-{uid}.json"
    assert record.exists() and spec.exists()

    refused = page("Uninstall the release", check=False)
    say(f"helm uninstall refused: {refused.strip()}")
    assert not refused.startswith("exit 0"), refused
    assert "uninstall-check" in refused
    assert node.driver_ready() is not None  # nothing was removed
    named = page("If the check refused, read which pods hold claims")
    assert f"default/web (claim web-cpus on {node.node})" in named, named

    page("Or uninstall with those pods running")
    wait_for(lambda: node.driver_pod() is None, "driver pod gone", timeout=120, interval=0.3)
    assert node.running("web") is not None
    assert node.cpus_of("web", "work") == pinned  # the kernel: still on its CPUs
    assert record.exists() and spec.exists()  # what the page says stays

    with step("the chart installed again"):
        node.install()
        wait_for(node.driver_ready, "driver pod Ready", timeout=180, interval=0.3)
        wait_for(node.published, "ResourceSlices published", timeout=120, interval=0.3)
    assert node.running("web") is not None
    assert node.cpus_of("web", "work") == pinned
    with step("the pod deleted: its claim unprepared by the driver installed again"):
        node.delete("pod", "web")
        wait_for(lambda: not spec.exists() and not record.exists(),
                 "the claim's CDI spec and record removed", timeout=120, interval=0.3)  # fmt: skip
        node.delete("resourceclaim", "web-cpus")

    page("Uninstall the release")  # the check lets it through now
    wait_for(lambda: node.driver_pod() is None, "driver pod gone", timeout=120, interval=0.3)
    wait_for(lambda: not node.slices(), "ResourceSlices removed", timeout=120, interval=0.3)
    assert node.helm("list", "-n", NAMESPACE, "-q").split() == []
    for kind in ("jobs,serviceaccounts", "clusterroles,clusterrolebindings"):
        left = node.kubectl("get", kind, "-A", "-l", HOOK_LABEL, "-o", "name")
        assert left.strip() == "", f"the check's {kind} left: {left}"
    assert RELEASE not in node.kubectl("get", "deviceclasses", "-o", "name")

    page("Remove what is left on the node")
    leftovers = [
        *(str(p) for p in (node.state_dir,) if p.exists()),
        *(str(p) for p in Path(node.kubelet_root).glob("plugins*/dra.cpu")),
        *(str(p) for p in CDI.glob("dra.k8s.io-cpu_*")),
        *(str(p) for p in CDI.glob("dra.cpu_metadata_*")),
    ]
    assert leftovers == []
