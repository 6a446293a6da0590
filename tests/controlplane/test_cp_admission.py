"""The chart's ValidatingAdmissionPolicy and NetworkPolicy on the real API server.

The chart is rendered by helm with the API versions the server advertises, and its RBAC,
policy, binding and NetworkPolicy are applied. The driver's ServiceAccount then writes
ResourceSlices with a token bound to a pod on a node, as the kubelet mounts it into the
driver's pod: the server puts that node's name into the request's user info
(`authentication.kubernetes.io/node-name`), which is how the policy learns the node the driver
runs on. Slices of driver dra.cpu for that node may be created, updated and deleted; slices of
another node or another driver are refused with the policy's message. A credential that names
no node (a token not bound to a pod, plain impersonation) may write no slice at all.

The NetworkPolicy is only checked to be accepted by the server's validation as rendered: this
control plane runs no CNI, and a NetworkPolicy is enforced by the CNI alone.
"""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from controlplane.checks import complete, published, slices
from harness.control_plane import KUBE_VERSION, REPO, CommandError, ControlPlane
from harness.driver_stack import DriverStack
from harness.waits import wait_for

pytestmark = [pytest.mark.controlplane, pytest.mark.timeout(600)]
HELM = REPO / ".tools" / "bin" / "helm"
CHART = REPO / "helm" / "dra-driver-cpu"
RELEASE, CHART_NAMESPACE = "dra-driver-cpu", "kube-system"
VAP_RESOURCE = "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy"
APPLIED = {
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "DeviceClass",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "NetworkPolicy",
}
NODE, OTHER_NODE = "vap-node-a", "vap-node-b"
DRIVER_POD = "vap-driver"
POLICY = f"ValidatingAdmissionPolicy '{RELEASE}-resourceslices'"
OTHER_NODE_MESSAGE = "the dra.cpu driver may only write ResourceSlices of the node it runs on"
OTHER_DRIVER_MESSAGE = "the dra.cpu driver may only write ResourceSlices of driver dra.cpu"


def resource_slice(name: str, node: str, driver: str = "dra.cpu", devices: int = 1) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": name},
            "spec": {
                "driver": driver,
                "nodeName": node,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": f"cpu{i}"} for i in range(devices)],
            },
        }
    )


def served_policy_api(cp: ControlPlane) -> bool:
    names = cp.kubectl("api-resources", "--api-group=admissionregistration.k8s.io", "-o", "name")
    return "validatingadmissionpolicies.admissionregistration.k8s.io" in names.split()


@pytest.fixture(scope="module")
def chart(control_plane: ControlPlane) -> Iterator[list[dict[str, Any]]]:
    if not HELM.exists():
        pytest.skip(f"helm not installed at {HELM} (run make helm-bin)")
    # helm install learns the served APIs from discovery; `helm template` is told them.
    assert served_policy_api(control_plane), "the server does not serve the policy API"
    rendered = subprocess.run(
        [str(HELM), "template", RELEASE, str(CHART), "--no-hooks", "--namespace", CHART_NAMESPACE,
         "--kube-version", KUBE_VERSION, "--api-versions", VAP_RESOURCE],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    documents = [d for d in yaml.safe_load_all(rendered) if d and d.get("kind") in APPLIED]
    assert {d["kind"] for d in documents} == APPLIED
    control_plane.apply(*documents)
    try:
        yield documents
    finally:
        # The policy would refuse the unbound tokens other modules' plugins run with.
        for kind in ("ValidatingAdmissionPolicyBinding", "ValidatingAdmissionPolicy"):
            for name in [d["metadata"]["name"] for d in documents if d["kind"] == kind]:
                control_plane.kubectl("delete", kind, name, "--ignore-not-found")
        for node in (NODE, OTHER_NODE):
            control_plane.kubectl("delete", "resourceslices", "--ignore-not-found",
                                  "--field-selector", f"spec.nodeName={node}")  # fmt: skip
        control_plane.kubectl("delete", "pod", DRIVER_POD, "-n", CHART_NAMESPACE,
                              "--ignore-not-found", "--wait=false")  # fmt: skip


def service_account_name(chart: list[dict[str, Any]]) -> str:
    (account,) = [d for d in chart if d["kind"] == "ServiceAccount"]
    return str(account["metadata"]["name"])


@pytest.fixture(scope="module")
def driver_token(
    control_plane: ControlPlane,
    chart: list[dict[str, Any]],
    tmp_path_factory: pytest.TempPathFactory,
) -> Path:
    """A token of the chart's ServiceAccount bound to a pod on NODE, as the kubelet projects
    it into the driver's pod."""
    cp = control_plane
    for node in (NODE, OTHER_NODE):
        if not cp.items("nodes", selector=f"metadata.name={node}"):
            cp.register_node(node)
    cp.kubectl("delete", "pod", DRIVER_POD, "-n", CHART_NAMESPACE, "--ignore-not-found")
    cp.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": DRIVER_POD, "namespace": CHART_NAMESPACE},
            "spec": {
                "nodeName": NODE,
                "serviceAccountName": service_account_name(chart),
                "tolerations": [{"operator": "Exists"}],
                "containers": [{"name": "driver", "image": "registry.k8s.io/pause:3.10"}],
            },
        }
    )
    path = tmp_path_factory.mktemp("vap") / "kubeconfig"
    return cp.token_kubeconfig(
        CHART_NAMESPACE, service_account_name(chart), path, bound_pod=DRIVER_POD
    )


def refusal(cp: ControlPlane, kubeconfig: Path, *args: str, stdin: str | None = None) -> str:
    with pytest.raises(CommandError) as refused:
        cp.kubectl(*args, stdin=stdin, kubeconfig=kubeconfig)
    return str(refused.value)


def policy_in_force(cp: ControlPlane, kubeconfig: Path) -> bool:
    """The admission plugin picks a new policy up from its informer a moment after it is
    stored: probe with a slice the policy refuses until the refusal names it."""
    try:
        cp.kubectl("create", "-f", "-", stdin=resource_slice("vap-probe", OTHER_NODE),
                   kubeconfig=kubeconfig)  # fmt: skip
    except CommandError as exc:
        return POLICY in str(exc)
    cp.kubectl("delete", "resourceslice", "vap-probe")
    return False


@pytest.fixture(scope="module")
def enforced(control_plane: ControlPlane, driver_token: Path) -> Path:
    wait_for(
        lambda: policy_in_force(control_plane, driver_token),
        "the policy to be in force",
        timeout=60,
        interval=0.2,
    )
    return driver_token


def test_the_token_names_the_node_of_its_pod(control_plane: ControlPlane, enforced: Path) -> None:
    review = yaml.safe_load(control_plane.kubectl("auth", "whoami", "-o", "yaml",
                                                  kubeconfig=enforced))  # fmt: skip
    extra = review["status"]["userInfo"]["extra"]
    assert extra["authentication.kubernetes.io/node-name"] == [NODE]
    assert extra["authentication.kubernetes.io/pod-name"] == [DRIVER_POD]


def test_the_driver_writes_the_slices_of_its_own_node(
    control_plane: ControlPlane, enforced: Path
) -> None:
    cp = control_plane
    cp.kubectl("create", "-f", "-", stdin=resource_slice("vap-own", NODE), kubeconfig=enforced)
    current = cp.get("resourceslice", "vap-own")
    current["spec"]["devices"].append({"name": "cpu1"})
    cp.kubectl("replace", "-f", "-", stdin=yaml.safe_dump(current), kubeconfig=enforced)
    assert len(cp.get("resourceslice", "vap-own")["spec"]["devices"]) == 2
    cp.kubectl("delete", "resourceslice", "vap-own", kubeconfig=enforced)
    assert not cp.items("resourceslices", selector="metadata.name=vap-own")


@pytest.mark.compat
@pytest.mark.parametrize(
    ("name", "node", "driver", "message"),
    [
        ("vap-other-node", OTHER_NODE, "dra.cpu", OTHER_NODE_MESSAGE),
        ("vap-other-driver", NODE, "gpu.example.com", OTHER_DRIVER_MESSAGE),
    ],
    ids=["another-node", "another-driver"],
)
def test_creating_a_slice_it_does_not_own_is_refused_with_the_policys_message(
    control_plane: ControlPlane, enforced: Path, name: str, node: str, driver: str, message: str
) -> None:
    cp = control_plane
    said = refusal(cp, enforced, "create", "-f", "-", stdin=resource_slice(name, node, driver))
    assert f"{POLICY} with binding '{RELEASE}-resourceslices' denied request: {message}" in said
    assert not cp.items("resourceslices", selector=f"metadata.name={name}")


def test_updating_or_deleting_another_nodes_slice_is_refused(
    control_plane: ControlPlane, enforced: Path
) -> None:
    cp = control_plane
    cp.kubectl("delete", "resourceslice", "vap-victim", "--ignore-not-found")
    cp.create(yaml.safe_load(resource_slice("vap-victim", OTHER_NODE)))  # as admin
    victim = cp.get("resourceslice", "vap-victim")
    grown = {**victim, "spec": {**victim["spec"], "devices": [{"name": "cpu0"}, {"name": "x"}]}}
    said = refusal(cp, enforced, "replace", "-f", "-", stdin=yaml.safe_dump(grown))
    assert f"denied request: {OTHER_NODE_MESSAGE}" in said
    said = refusal(cp, enforced, "delete", "resourceslice", "vap-victim")
    assert f"denied request: {OTHER_NODE_MESSAGE}" in said
    # Moving it onto its own node is refused before admission: nodeName is immutable.
    moved = {**victim, "spec": {**victim["spec"], "nodeName": NODE}}
    said = refusal(cp, enforced, "replace", "-f", "-", stdin=yaml.safe_dump(moved))
    assert "spec.nodeName" in said and "field is immutable" in said
    assert cp.get("resourceslice", "vap-victim")["spec"] == victim["spec"]
    cp.kubectl("delete", "resourceslice", "vap-victim")


def test_a_credential_naming_no_node_writes_no_slice(
    control_plane: ControlPlane, chart: list[dict[str, Any]], enforced: Path, tmp_path: Path
) -> None:
    cp = control_plane
    account = f"system:serviceaccount:{CHART_NAMESPACE}:{service_account_name(chart)}"
    unbound = cp.token_kubeconfig(CHART_NAMESPACE, service_account_name(chart),
                                  tmp_path / "unbound")  # fmt: skip
    impersonating = ("--as", account, "--as-group", "system:serviceaccounts",
                     "--as-group", "system:authenticated")  # fmt: skip
    said = refusal(cp, unbound, "create", "-f", "-", stdin=resource_slice("vap-unbound", NODE))
    assert f"denied request: {OTHER_NODE_MESSAGE}" in said
    # No user info extra at all: the policy still answers with its own message.
    said = refusal(cp, cp.kubeconfig, "create", *impersonating, "-f", "-",
                   stdin=resource_slice("vap-impersonated", NODE))  # fmt: skip
    assert f"denied request: {OTHER_NODE_MESSAGE}" in said
    # Impersonation carrying the node name is what a bound token gives; allowed.
    cp.kubectl("create", *impersonating,
               "--as-user-extra", f"authentication.kubernetes.io/node-name={NODE}",
               "-f", "-", stdin=resource_slice("vap-impersonated", NODE))  # fmt: skip
    cp.kubectl("delete", "resourceslice", "vap-impersonated")


def test_other_writers_are_not_matched(control_plane: ControlPlane, enforced: Path) -> None:
    # The policy binds the driver's ServiceAccount only: the admin writes any slice.
    cp = control_plane
    cp.create(yaml.safe_load(resource_slice("vap-admin", OTHER_NODE, "gpu.example.com")))
    cp.kubectl("delete", "resourceslice", "vap-admin")


async def test_the_driver_publishes_its_slices_under_the_policy(
    control_plane: ControlPlane, enforced: Path
) -> None:
    cp = control_plane
    stack = DriverStack(NODE, enforced, config={"cpuDeviceMode": "individual"})
    try:
        await stack.start()
        found = published(cp, NODE, 40, "slices published with the bound token")
        cp.kubectl("delete", "resourceslice", found[0]["metadata"]["name"])
        wait_for(
            lambda: complete(slices(cp, NODE), 40), "slice recreated", timeout=60, interval=0.2
        )
        status = await stack.status()
        assert status.last_publish_error == ""
        assert "denied request" not in stack.plugin_log()
    finally:
        stack.close()
        await asyncio.sleep(0)


def test_the_network_policy_is_accepted_as_rendered(
    control_plane: ControlPlane, chart: list[dict[str, Any]]
) -> None:
    # Accepted by the server's validation; enforcing it is the CNI's job (none runs here).
    (rendered,) = [d for d in chart if d["kind"] == "NetworkPolicy"]
    stored = control_plane.get("networkpolicy", rendered["metadata"]["name"], CHART_NAMESPACE)
    assert stored["spec"]["ingress"] == rendered["spec"]["ingress"]
    assert stored["spec"]["podSelector"] == rendered["spec"]["podSelector"]
    assert stored["spec"]["policyTypes"] == ["Ingress"]
    shown = subprocess.run(
        [str(HELM), "template", RELEASE, str(CHART), "--no-hooks", "--namespace", CHART_NAMESPACE,
         "--kube-version", KUBE_VERSION, "--show-only", "templates/daemonset.yaml"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    (daemonset,) = [d for d in yaml.safe_load_all(shown) if d]
    labels = daemonset["spec"]["template"]["metadata"]["labels"]
    assert stored["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    # The server does validate it: a malformed port is refused.
    broken = {**rendered, "metadata": {**rendered["metadata"], "name": "vap-broken"}}
    broken["spec"] = {**rendered["spec"], "ingress": [{"ports": [{"port": 70000}]}]}
    with pytest.raises(CommandError, match=r"(?i)must be between 1 and 65535"):
        control_plane.apply(broken)
