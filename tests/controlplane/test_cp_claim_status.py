"""ResourceClaim status.devices on the real API server, written by the plugin running on the
chart's ServiceAccount with a token bound to a pod on its node (as the kubelet mounts it), the
chart's RBAC and both admission policies in force.

A claim asks for CPUs of dra.cpu and a device of a second driver (its slice published by the
admin), so the real scheduler allocates both and the second driver's entry can stand beside
ours: server-side apply keeps the list-map entries per field manager, and removing ours leaves
theirs. The entry survives a plugin restart and is removed by an unprepare after it; a writer
applying under another manager meanwhile keeps its entry, one taking ours without force is
refused naming our manager, and an update with a stale resourceVersion is a conflict for that
writer only. The driver's token may not write another driver's entries nor a claim of another
node.
"""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from controlplane.checks import (
    DEVICE_CLASS,
    NAMESPACE,
    allocation,
    driver_pod,
)
from harness.control_plane import KUBE_VERSION, REPO, CommandError, ControlPlane
from harness.driver_stack import DriverStack
from harness.waits import wait_for

from dracpu.core.cpuset import CPUSet
from dracpu.core.errors import DracpuError
from dracpu.dev.kubelet_sim import Claim

pytestmark = [pytest.mark.controlplane, pytest.mark.timeout(600)]
HELM = REPO / ".tools" / "bin" / "helm"
CHART = REPO / "helm" / "dra-driver-cpu"
RELEASE, CHART_NAMESPACE = "dra-driver-cpu", "kube-system"
VAP_RESOURCE = "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy"
APPLIED = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "DeviceClass",
           "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}  # fmt: skip
NODE, OTHER_NODE = "status-node", "status-other"
DRIVER_POD = "status-driver"
OTHER_DRIVER = "net.example.com"
OTHER_MANAGER = f"{OTHER_DRIVER}/{NODE}"
MANAGER = f"dra.cpu/{NODE}"
STALE_UID = "0b0d8f2e-0000-4000-8000-000000000000"


def far_cpu_slice(node: str) -> dict[str, Any]:
    """dra.cpu devices of a node whose plugin is not running (published by the admin)."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"dra.cpu-{node}"},
            "spec": {"driver": "dra.cpu", "nodeName": node,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": f"cpudev{i:03d}"} for i in range(4)]}}  # fmt: skip


def other_driver_objects(node: str) -> list[dict[str, Any]]:
    return [
        {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
         "metadata": {"name": OTHER_DRIVER},
         "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{OTHER_DRIVER}"'}}]}},
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
         "metadata": {"name": f"{OTHER_DRIVER}-{node}"},
         "spec": {"driver": OTHER_DRIVER, "nodeName": node,
                  "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                  "devices": [{"name": f"nic{i}"} for i in range(4)]}},
    ]  # fmt: skip


def two_driver_claim(name: str, capacity: bool = True) -> dict[str, Any]:
    cpus: dict[str, Any] = {"deviceClassName": "dra.cpu", "count": 1}
    if capacity:
        cpus["capacity"] = {"requests": {"dra.cpu/cpu": "2"}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"devices": {"requests": [
            {"name": "cpus", "exactly": cpus},
            {"name": "nic", "exactly": {"deviceClassName": OTHER_DRIVER}},
        ]}},
    }  # fmt: skip


def pod_for(name: str, claim_name: str, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"nodeSelector": {"kubernetes.io/hostname": node},
                 "tolerations": [{"operator": "Exists"}],
                 "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                                 "resources": {"claims": [{"name": "cpus"}, {"name": "nic"}]}}],
                 "resourceClaims": [{"name": "cpus", "resourceClaimName": claim_name},
                                    {"name": "nic", "resourceClaimName": claim_name}]},
    }  # fmt: skip


@pytest.fixture(scope="module")
def driver_token(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    cp = control_plane
    if not HELM.exists():
        pytest.skip(f"helm not installed at {HELM} (run make helm-bin)")
    rendered = subprocess.run(
        [str(HELM), "template", RELEASE, str(CHART), "--no-hooks", "--namespace", CHART_NAMESPACE,
         "--kube-version", KUBE_VERSION, "--api-versions", VAP_RESOURCE],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    documents = [d for d in yaml.safe_load_all(rendered) if d and d.get("kind") in APPLIED]
    assert {d["kind"] for d in documents} == APPLIED
    cp.apply(*documents)
    cp.apply(DEVICE_CLASS)
    for node in (NODE, OTHER_NODE):
        if not cp.items("nodes", selector=f"metadata.name={node}"):
            cp.register_node(node)
        cp.apply(*other_driver_objects(node))
    cp.apply(far_cpu_slice(OTHER_NODE))
    (account,) = [d["metadata"]["name"] for d in documents if d["kind"] == "ServiceAccount"]
    cp.kubectl("delete", "pod", DRIVER_POD, "-n", CHART_NAMESPACE, "--ignore-not-found")
    cp.create(driver_pod(DRIVER_POD, CHART_NAMESPACE, NODE, account))
    path = tmp_path_factory.mktemp("status") / "kubeconfig"
    try:
        yield cp.token_kubeconfig(CHART_NAMESPACE, account, path, bound_pod=DRIVER_POD)
    finally:
        # Other modules' plugins run with unbound tokens the policies would refuse.
        for kind in ("ValidatingAdmissionPolicyBinding", "ValidatingAdmissionPolicy"):
            for name in [d["metadata"]["name"] for d in documents if d["kind"] == kind]:
                cp.kubectl("delete", kind, name, "--ignore-not-found")
        cp.kubectl("delete", "resourceslice", f"dra.cpu-{OTHER_NODE}", "--ignore-not-found")
        cp.kubectl("delete", "pod", DRIVER_POD, "-n", CHART_NAMESPACE, "--ignore-not-found",
                   "--wait=false")  # fmt: skip


@pytest.fixture(scope="module")
def driver_kubeconfig(driver_token: Path) -> Path:
    """The module's driver runs on the chart's ServiceAccount, its token bound to a pod."""
    return driver_token


def ours(cp: ControlPlane, name: str, driver: str = "dra.cpu") -> dict[str, Any] | None:
    devices = (cp.get("resourceclaim", name, NAMESPACE).get("status") or {}).get("devices") or []
    found = [d for d in devices if d["driver"] == driver]
    return found[0] if found else None


def cdi_cpus(stack: DriverStack, uid: str) -> str:
    spec = json.loads((stack.root / "cdi" / f"dra.k8s.io-cpu_claim-{uid}.json").read_text())
    env = [e for d in spec["devices"] for e in d["containerEdits"].get("env", [])]
    (value,) = {e.split("=", 1)[1] for e in env if e.startswith("DRA_CPUSET_")}
    return value


def apply_entry(
    cp: ControlPlane,
    name: str,
    entry: dict[str, Any],
    manager: str,
    *,
    force: bool = True,
    kubeconfig: Path | None = None,
) -> str:
    document = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                "metadata": {"name": name, "namespace": NAMESPACE},
                "status": {"devices": [entry]}}  # fmt: skip
    return cp.kubectl(
        "apply", "--server-side", "--subresource=status", f"--field-manager={manager}",
        *(["--force-conflicts"] if force else []), "-f", "-",
        stdin=yaml.safe_dump(document), kubeconfig=kubeconfig,
    )  # fmt: skip


def allocated(cp: ControlPlane, name: str) -> dict[str, dict[str, Any]]:
    """Request name -> allocation result, once the scheduler has allocated the claim."""
    found = wait_for(lambda: allocation(cp, name), f"{name} allocated", timeout=60, interval=0.2)
    return {r["request"]: r for r in found["devices"]["results"]}


def our_status_writes(cp: Any, name: str) -> list[tuple[str, str]]:
    """(operation, time) of every managedFields entry our manager holds on the status."""
    shown = cp.kubectl("get", "resourceclaim", name, "-n", NAMESPACE, "-o", "json",
                       "--show-managed-fields")  # fmt: skip
    return [
        (m["operation"], m.get("time", ""))
        for m in json.loads(shown)["metadata"]["managedFields"]
        if m["manager"] == MANAGER and m.get("subresource") == "status"
    ]


@pytest.mark.compat
async def test_status_written_kept_across_a_restart_and_removed_on_unprepare(
    control_plane: ControlPlane, running_stack: DriverStack
) -> None:
    cp = control_plane
    cp.create(two_driver_claim("st-main"), pod_for("st-main", "st-main", NODE))
    results = allocated(cp, "st-main")
    uid = cp.get("resourceclaim", "st-main", NAMESPACE)["metadata"]["uid"]
    kubelet = await running_stack.kubelet()
    try:
        assert (await kubelet.prepare([Claim(NAMESPACE, "st-main", uid)]))[uid].error == ""
    finally:
        await kubelet.close()
    entry = wait_for(lambda: ours(cp, "st-main"), "the status entry", timeout=30, interval=0.2)
    cpu = results["cpus"]
    assert (entry["pool"], entry["device"], entry["shareID"]) == (
        cpu["pool"], cpu["device"], cpu["shareID"])  # fmt: skip
    data = entry["data"]
    assert data["cpuset"] == cdi_cpus(running_stack, uid) and len(CPUSet.parse(data["cpuset"])) == 2
    assert data["numaNodes"] == [int(cpu["device"][-3:])] and data["wholeCores"] is True
    (ready,) = entry["conditions"]
    assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "True", "Prepared")
    shown = cp.kubectl("get", "resourceclaim", "st-main", "-n", NAMESPACE, "-o", "json",
                       "--show-managed-fields")  # fmt: skip
    managed = json.loads(shown)["metadata"]["managedFields"]
    assert any(m["manager"] == MANAGER and m["operation"] == "Apply"
               and m.get("subresource") == "status" for m in managed)  # fmt: skip

    # The other driver's entry, under its own manager, stands beside ours.
    nic = results["nic"]
    theirs = {"driver": OTHER_DRIVER, "pool": nic["pool"], "device": nic["device"],
              "data": {"link": "up"}}  # fmt: skip
    apply_entry(cp, "st-main", theirs, OTHER_MANAGER)
    assert ours(cp, "st-main", OTHER_DRIVER)["data"] == {"link": "up"}  # type: ignore[index]
    assert ours(cp, "st-main") == entry

    # Other controllers may update the claim; what must not change is our manager's write.
    written = our_status_writes(cp, "st-main")
    await running_stack.restart_plugin()
    assert ours(cp, "st-main") == entry
    assert our_status_writes(cp, "st-main") == written, "a restart rewrote our status"

    kubelet = await running_stack.kubelet()
    try:
        assert await kubelet.unprepare([Claim(NAMESPACE, "st-main", uid)]) == {uid: ""}
    finally:
        await kubelet.close()
    wait_for(lambda: ours(cp, "st-main") is None, "our entry removed", timeout=30, interval=0.2)
    assert ours(cp, "st-main", OTHER_DRIVER)["data"] == {"link": "up"}  # type: ignore[index]


async def test_concurrent_and_conflicting_writers(
    control_plane: ControlPlane, running_stack: DriverStack
) -> None:
    cp = control_plane
    cp.create(two_driver_claim("st-race"), pod_for("st-race", "st-race", NODE))
    results = allocated(cp, "st-race")
    uid = cp.get("resourceclaim", "st-race", NAMESPACE)["metadata"]["uid"]
    nic = results["nic"]
    stale = cp.get("resourceclaim", "st-race", NAMESPACE)
    errors: list[str] = []

    def other_writer() -> None:  # another driver updating its entry all along
        for round_ in range(15):
            entry = {"driver": OTHER_DRIVER, "pool": nic["pool"], "device": nic["device"],
                     "data": {"round": round_}}  # fmt: skip
            try:
                apply_entry(cp, "st-race", entry, OTHER_MANAGER)
            except CommandError as exc:
                errors.append(str(exc))

    writer = threading.Thread(target=other_writer)
    writer.start()
    kubelet = await running_stack.kubelet()
    try:
        assert (await kubelet.prepare([Claim(NAMESPACE, "st-race", uid)]))[uid].error == ""
        writer.join()
        assert errors == []
        entry = wait_for(lambda: ours(cp, "st-race"), "our entry", timeout=30, interval=0.2)
        assert entry["data"]["cpuset"] == cdi_cpus(running_stack, uid)
        assert ours(cp, "st-race", OTHER_DRIVER)["data"] == {"round": 14}  # type: ignore[index]

        # Taking our entry without force is a conflict that names our manager.
        taken = dict(entry, data={"cpuset": "0-39"})
        with pytest.raises(CommandError, match=rf'conflict with "{MANAGER}"'):
            apply_entry(cp, "st-race", taken, "someone-else", force=False)
        # A get-modify-put of the status from before our write fails for that writer alone.
        stale["status"]["devices"] = []
        with pytest.raises(CommandError, match="the object has been modified"):
            cp.kubectl("replace", "--subresource=status", "-f", "-",
                       stdin=yaml.safe_dump(stale))  # fmt: skip
        assert ours(cp, "st-race") == entry

        assert await kubelet.unprepare([Claim(NAMESPACE, "st-race", uid)]) == {uid: ""}
    finally:
        await kubelet.close()
    wait_for(lambda: ours(cp, "st-race") is None, "our entry removed", timeout=30, interval=0.2)
    assert ours(cp, "st-race", OTHER_DRIVER) is not None
    log = running_stack.plugin_log()
    assert ": 403 " not in log and "refused" not in log


def test_the_driver_token_writes_only_its_own_entries_on_its_own_node(
    control_plane: ControlPlane, running_stack: DriverStack, driver_token: Path
) -> None:
    cp = control_plane
    cp.create(two_driver_claim("st-own"), pod_for("st-own", "st-own", NODE),
              two_driver_claim("st-far", capacity=False),
              pod_for("st-far", "st-far", OTHER_NODE))  # fmt: skip
    here, far = allocated(cp, "st-own"), allocated(cp, "st-far")
    nic = here["nic"]
    theirs = {"driver": OTHER_DRIVER, "pool": nic["pool"], "device": nic["device"]}
    with pytest.raises(CommandError, match=r"(?i)forbidden|denied"):
        apply_entry(cp, "st-own", theirs, MANAGER, kubeconfig=driver_token)
    cpu = far["cpus"]
    elsewhere = {"driver": "dra.cpu", "pool": cpu["pool"], "device": cpu["device"],
                 "data": {"cpuset": "0"}}  # fmt: skip
    with pytest.raises(CommandError, match=r"(?i)forbidden|denied"):
        apply_entry(cp, "st-far", elsewhere, MANAGER, kubeconfig=driver_token)
    assert ours(cp, "st-own", OTHER_DRIVER) is None and ours(cp, "st-far") is None
    # Its own entry of a claim on its node it may write.
    cpu = here["cpus"]
    own = {"driver": "dra.cpu", "pool": cpu["pool"], "device": cpu["device"],
           "shareID": cpu["shareID"], "data": {"cpuset": "0"}}  # fmt: skip
    apply_entry(cp, "st-own", own, MANAGER, kubeconfig=driver_token)
    assert ours(cp, "st-own")["data"] == {"cpuset": "0"}  # type: ignore[index]


async def test_a_claim_replaced_under_the_same_name_is_refused_by_its_uid(
    control_plane: ControlPlane,
) -> None:
    from dracpu.dra_plugin.cluster.apiserver import KubernetesAPI

    cp = control_plane
    cp.create(two_driver_claim("st-uid"))
    api = KubernetesAPI(str(cp.kubeconfig))
    try:
        with pytest.raises(DracpuError, match="uid") as refused:
            await api.apply_claim_status(NAMESPACE, "st-uid", STALE_UID, MANAGER, [])
    finally:
        await api.aclose()
    # What the server says, so the writer knows the claim is not ours to write any more.
    assert "immutable" in str(refused.value) or "Precondition" in str(refused.value)
