"""The "Uninstall" section of docs/user/installation.md run as the page writes it on both nodes
of the fleet, with a claimed pod running on each (the tier's `claimed` pods): the chart's
pre-delete check refuses and names both pods with their nodes, `--no-hooks` uninstalls anyway
and each pod keeps its CPUs (read from its own node's kernel) and its files, the chart installed
again finds both where they were, and once the pods are gone the check lets the uninstall
through and the page's command, run on each node, removes what the driver left there.

The module runs last (its name): it takes the release and the claimed pods away, and installs
the chart again at its end for whatever runs after it. The page's generic paths stand for the
fleet's (one `kubeletRootDir` and one `allocator.stateDir` for both nodes); the host's commands
run on the host, the node's clean-up also in the guest."""

from __future__ import annotations

from pathlib import Path

import pytest
from bignode.cluster import GuestCluster
from fleet.nodes import GUEST_NODE, GUEST_POD, HOST_POD, Fleet
from harness.cluster import NAMESPACE, RELEASE, ROOT, claim_cpus, say, step
from harness.page_steps import Section
from harness.speed import budget
from harness.waits import wait_for

from dracpu.core.cpuset import CPUSet

pytestmark = [pytest.mark.fleet, pytest.mark.timeout(2700)]

PAGE = ROOT / "docs/user/installation.md"
CDI = "/var/run/cdi"
HOOK_LABEL = "app.kubernetes.io/component=uninstall-check"
CLEAN_UP = "Remove what is left on the node"


class Files:
    """What the driver keeps of a claim on one node, read on that node."""

    def __init__(self, fleet: Fleet, node: str) -> None:
        self.fleet = fleet
        self.node = node

    def exist(self, *paths: str) -> list[str]:
        """Those of `paths` (globs allowed) present on the node."""
        if self.node != GUEST_NODE:
            return sorted(str(p) for pattern in paths for p in Path("/").glob(pattern[1:]))
        listing = " ".join(paths)  # the fleet's paths: no space, globs left to the shell
        out = self.fleet.guest.guest.sh("sh", "-c", f"ls -d {listing} 2>/dev/null || true")
        return sorted(out.split())

    def of_claim(self, uid: str) -> list[str]:
        state = self.fleet.host.state_dir
        return self.exist(f"{state}/claims/{uid}.json", f"{CDI}/dra.k8s.io-cpu_claim-{uid}.json")

    def left(self) -> list[str]:
        root, state = self.fleet.host.kubelet_root, self.fleet.host.state_dir
        return self.exist(
            str(state),
            f"{root}/plugins/dra.cpu",
            f"{root}/plugins_registry/dra.cpu",
            f"{CDI}/dra.k8s.io-cpu_*",
            f"{CDI}/dra.cpu_metadata_*",
        )


def gone(files: Files, uid: str) -> None:
    wait_for(lambda: not files.of_claim(uid), f"the claim's CDI spec and record removed on "
             f"{files.node}", timeout=budget(300), interval=1.0)  # fmt: skip


def test_uninstall_with_a_claimed_pod_on_each_node_as_the_page_says(claimed: Fleet) -> None:
    fleet = claimed
    host = fleet.host
    paths = {"/var/lib/kubelet": host.kubelet_root, "/var/lib/dracpu": str(host.state_dir)}
    section = Section(PAGE, "## Uninstall", host, paths)
    page = section.run

    pods = {host.node: HOST_POD, GUEST_NODE: GUEST_POD}
    files = {node: Files(fleet, node) for node in fleet.nodes}

    def pinned() -> dict[str, CPUSet]:
        """Each pod's CPUs as its node's kernel has them, equal to its claim's."""
        seen = {}
        for node, pod in pods.items():
            view = fleet.view(node)
            if isinstance(view, GuestCluster):
                view.refresh()  # a fresh snapshot of the guest's containers
            cpus = view.cpus_of(pod, "work")
            assert cpus == claim_cpus(view.env_of(pod, "work")), (node, cpus)
            seen[node] = cpus
        return seen

    before = pinned()
    uids = {node: host.get("resourceclaim", pod)["metadata"]["uid"] for node, pod in pods.items()}
    for node, uid in uids.items():
        assert len(files[node].of_claim(uid)) == 2, (node, files[node].of_claim(uid))

    refused = page("Uninstall the release", check=False)
    say(f"helm uninstall refused: {refused.strip()}")
    assert not refused.startswith("exit 0"), refused
    assert "uninstall-check" in refused
    assert set(fleet.ready_drivers()) == set(fleet.nodes)  # nothing was removed
    named = page("If the check refused, read which pods hold claims")
    for node, pod in pods.items():
        assert f"default/{pod} (claim {pod} on {node})" in named, named

    page("Or uninstall with those pods running")
    wait_for(lambda: not fleet.driver_pods(), "both driver pods gone",
             timeout=budget(300), interval=1.0)  # fmt: skip
    assert pinned() == before  # the kernels: still on their CPUs
    for node, uid in uids.items():  # what the page says stays
        assert len(files[node].of_claim(uid)) == 2, (node, files[node].of_claim(uid))

    with step("fleet: the chart installed again"):
        fleet.install()
        wait_for(lambda: set(fleet.ready_drivers()) == set(fleet.nodes) or None,
                 "a Ready driver pod on each node", timeout=budget(900), interval=1.0)  # fmt: skip
    assert all(host.running(pod) for pod in pods.values())
    assert pinned() == before

    with step("fleet: the pods deleted, their claims unprepared by the drivers installed again"):
        wait = budget(300)  # the guest stops a pod's containers slowly
        for pod in pods.values():
            host.kubectl("delete", "pod", pod, "--wait=true", f"--timeout={wait:.0f}s",
                         timeout=wait + 60)  # fmt: skip
        for node, uid in uids.items():
            gone(files[node], uid)
        for pod in pods.values():
            host.delete("resourceclaim", pod)

    page("Uninstall the release")  # the check lets it through now
    wait_for(lambda: not fleet.driver_pods(), "both driver pods gone",
             timeout=budget(300), interval=1.0)  # fmt: skip
    wait_for(lambda: not host.slices(), "every node's ResourceSlices removed",
             timeout=budget(180), interval=1.0)  # fmt: skip
    assert host.helm("list", "-n", NAMESPACE, "-q").split() == []
    for kind in ("jobs,serviceaccounts", "clusterroles,clusterrolebindings"):
        left = host.kubectl("get", kind, "-A", "-l", HOOK_LABEL, "-o", "name")
        assert left.strip() == "", f"the check's {kind} left: {left}"
    assert RELEASE not in host.kubectl("get", "deviceclasses", "-o", "name")

    page(CLEAN_UP)  # on the host
    with step(f"page step: {CLEAN_UP}, in the guest"):
        fleet.guest.guest.sh("sh", "-c", section.script(CLEAN_UP))
    for node in fleet.nodes:
        assert files[node].left() == [], (node, files[node].left())

    with step("fleet: the chart installed again for what runs after"):
        fleet.install()
        wait_for(lambda: set(fleet.ready_drivers()) == set(fleet.nodes) or None,
                 "a Ready driver pod on each node", timeout=budget(900), interval=1.0)  # fmt: skip
