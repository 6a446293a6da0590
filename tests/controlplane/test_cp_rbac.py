"""The chart's RBAC, rendered by helm and applied to the real API server, is what the plugin
needs: running with that ServiceAccount's token (bound to a pod on its node, as the kubelet
mounts it) it publishes, repairs, prepares and writes the claim's status.devices; an action
outside the ClusterRole is refused with the server's reason."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest
import yaml
from controlplane.checks import allocation, claim, complete, driver_pod, pod, published, slices
from harness.control_plane import KUBE_VERSION, REPO, CommandError, ControlPlane
from harness.driver_stack import DriverStack
from harness.waits import wait_for

from dracpu.dev.kubelet_sim import Claim

pytestmark = [pytest.mark.controlplane, pytest.mark.timeout(600)]
HELM = REPO / ".tools" / "bin" / "helm"
CHART = REPO / "helm" / "dra-driver-cpu"
RELEASE, CHART_NAMESPACE = "dra-driver-cpu", "kube-system"
NAMESPACE = "default"
NODE = "rbac-node"
DRIVER_POD = "rbac-driver"
STACK_CONFIG = {"cpuDeviceMode": "individual"}
RBAC_KINDS = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "DeviceClass"}


@pytest.fixture(scope="module")
def chart_rbac(control_plane: ControlPlane) -> list[dict[str, object]]:
    if not HELM.exists():
        pytest.skip(f"helm not installed at {HELM} (run make helm-bin)")
    rendered = subprocess.run(
        [str(HELM), "template", RELEASE, str(CHART), "--no-hooks", "--namespace", CHART_NAMESPACE,
         "--kube-version", KUBE_VERSION],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    documents = [d for d in yaml.safe_load_all(rendered) if d and d.get("kind") in RBAC_KINDS]
    assert {d["kind"] for d in documents} == RBAC_KINDS
    control_plane.apply(*documents)
    return documents


@pytest.fixture(scope="module")
def service_account(
    control_plane: ControlPlane,
    chart_rbac: list[dict[str, object]],
    tmp_path_factory: pytest.TempPathFactory,
) -> Path:
    (account,) = [d for d in chart_rbac if d["kind"] == "ServiceAccount"]
    name = str(account["metadata"]["name"])  # type: ignore[index]
    cp = control_plane
    cp.register_node(NODE)
    cp.kubectl("delete", "pod", DRIVER_POD, "-n", CHART_NAMESPACE, "--ignore-not-found")
    cp.create(driver_pod(DRIVER_POD, CHART_NAMESPACE, NODE, name))
    path = tmp_path_factory.mktemp("sa") / "kubeconfig"
    return cp.token_kubeconfig(CHART_NAMESPACE, name, path, bound_pod=DRIVER_POD)


@pytest.fixture(scope="module")
def driver_kubeconfig(service_account: Path) -> Path:
    """The module's driver runs on the chart's ServiceAccount."""
    return service_account


async def test_the_plugin_runs_on_the_charts_service_account(
    control_plane: ControlPlane, stack: DriverStack, service_account: Path
) -> None:
    cp = control_plane
    await stack.start()
    found = published(cp, stack.node, 40, "slices published with the token")
    # Repair (watch, update, delete, create) under the same identity.
    cp.kubectl("delete", "resourceslice", found[0]["metadata"]["name"])
    wait_for(
        lambda: complete(slices(cp, stack.node), 40), "slice recreated", timeout=60, interval=0.2
    )
    status = await stack.status()
    assert status.last_publish_error == "" and status.node_uid

    # Prepare reads the claim with the token: get on resourceclaims is enough.
    cp.create(claim("rbac-claim", {"allocationMode": "ExactCount", "count": 2}),
              pod("rbac-pod", "rbac-claim", stack.node))  # fmt: skip
    wait_for(lambda: allocation(cp, "rbac-claim"), "allocation", timeout=60, interval=0.2)
    uid = cp.get("resourceclaim", "rbac-claim", NAMESPACE)["metadata"]["uid"]
    kubelet = await stack.kubelet()
    try:
        answer = await kubelet.prepare([Claim(NAMESPACE, "rbac-claim", uid)])
        assert answer[uid].error == ""
        assert len(answer[uid].devices) == 2
        missing = await kubelet.prepare([Claim("default", "no-such-claim", "u-x")])
        assert "404" in missing["u-x"].error and "not found" in missing["u-x"].error

        def written() -> list[dict[str, object]] | None:
            status = cp.get("resourceclaim", "rbac-claim", NAMESPACE).get("status") or {}
            return status.get("devices")

        # patch on resourceclaims/status and associated-node:patch on resourceclaims/driver.
        entries = wait_for(
            written, "status.devices written with the token", timeout=30, interval=0.2
        )
        assert len(entries) == 2 and {e["driver"] for e in entries} == {"dra.cpu"}
    finally:
        await kubelet.close()
    assert ": 403 " not in stack.plugin_log()


def test_actions_outside_the_cluster_role_are_refused(
    control_plane: ControlPlane, service_account: Path
) -> None:
    cp = control_plane
    cp.register_node("rbac-victim")
    for args in (
        ("delete", "node", "rbac-victim"),
        ("get", "pods", "-n", "kube-system"),
        ("create", "namespace", "rbac-not-allowed"),
        ("patch", "resourceclaim", "rbac-claim", "-n", "default", "--type=merge",
         "-p", '{"metadata":{"labels":{"x":"y"}}}'),
    ):  # fmt: skip
        with pytest.raises(CommandError, match=r"(?i)forbidden: User \"system:serviceaccount:"):
            cp.kubectl(*args, kubeconfig=service_account)
    assert cp.get("node", "rbac-victim")["metadata"]["name"] == "rbac-victim"


async def test_a_refused_write_is_logged_with_the_servers_reason(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    # A user that may do nothing: the plugin's log carries the server's sentence, not a code.
    nobody = control_plane.client("rbac-nobody", "nobody")
    stack = DriverStack("rbac-nobody-node", nobody)
    try:
        await stack.start()

        def refused() -> bool:
            return 'cannot list resource \\"resourceslices\\"' in stack.plugin_log() or (
                'cannot list resource "resourceslices"' in stack.plugin_log()
            )

        wait_for(refused, "the server's reason in the plugin log", timeout=60, interval=0.2)
        assert "403 Forbidden: resourceslices.resource.k8s.io is forbidden" in stack.plugin_log()
    finally:
        stack.close()
        await asyncio.sleep(0)
