"""The chart's least privilege, as rendered by the real helm: only this driver's kubelet plugin
dir is mounted, the NRI dir read-only, the api's port behind a NetworkPolicy, system
directories refused as host paths, and (where the cluster serves it) a ValidatingAdmissionPolicy
that keeps the ServiceAccount to ResourceSlices of driver dra.cpu on its own node."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from harness.helm import CHART, KUBE_VERSION, ensure_helm

pytestmark = pytest.mark.security

VAP = "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy"


@pytest.fixture(scope="module")
def helm() -> Path:
    binary, why_not = ensure_helm()
    if binary is None:
        pytest.skip(why_not)
    return binary


def template(helm: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(helm), "template", "dracpu", str(CHART), "--namespace", "kube-system",
         "--kube-version", KUBE_VERSION, *extra],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def objects(helm: Path, *extra: str) -> list[dict[str, Any]]:
    result = template(helm, *extra)
    assert result.returncode == 0, result.stderr
    return [o for o in yaml.safe_load_all(result.stdout) if o]


def of_kind(found: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in found if o["kind"] == kind]


def test_mounts_are_least_privilege(helm: Path) -> None:
    [daemonset] = of_kind(objects(helm), "DaemonSet")
    pod = daemonset["spec"]["template"]["spec"]
    host = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    assert host["kubelet-plugins"] == "/var/lib/kubelet/plugins/dra.cpu"
    # The kubelet's plugin watcher finds registration sockets in subdirectories, so only the
    # driver's own one is mounted, not every plugin's registration socket.
    assert host["kubelet-plugins-registry"] == "/var/lib/kubelet/plugins_registry/dra.cpu"
    assert not any(
        path in ("/var/lib/kubelet/plugins", "/var/lib/kubelet/plugins_registry")
        for path in host.values()
    ), host
    # The kubelet's root itself only read-only and in the dra-plugin alone: the CPU and Memory
    # Managers' checkpoints at its top, which the kubelet replaces by rename (a file mount
    # would keep showing the old one).
    roots = [
        (container["name"], mount.get("readOnly"))
        for container in pod["containers"]
        for mount in container["volumeMounts"]
        if host.get(mount["name"]) == "/var/lib/kubelet"
    ]
    assert roots == [("dra-plugin", True)]
    nri = next(c for c in pod["containers"] if c["name"] == "nri-plugin")
    [mount] = [m for m in nri["volumeMounts"] if m["name"] == "nri"]
    assert mount["readOnly"] is True
    api = next(c for c in pod["containers"] if c["name"] == "api")
    assert "/run/dracpu/allocator-ro.sock" in api["args"]


def test_the_api_port_is_behind_a_network_policy(helm: Path) -> None:
    [policy] = of_kind(objects(helm), "NetworkPolicy")
    [rule] = policy["spec"]["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": 8080}]
    assert rule["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}}}
    ]
    assert not of_kind(objects(helm, "--set", "api.networkPolicy.enabled=false"), "NetworkPolicy")


@pytest.mark.parametrize(
    "setting",
    [
        "allocator.stateDir=/",
        "allocator.stateDir=/etc",
        "allocator.stateDir=/usr/lib/x",
        "allocator.stateDir=/var/lib/../../etc",
        "nriPlugin.nriSocket=/etc/shadow",
        "nriPlugin.nriSocket=/proc/1/root.sock",
    ],
)
def test_dangerous_host_paths_are_refused(helm: Path, setting: str) -> None:
    result = template(helm, "--set", setting)
    assert result.returncode != 0 and "schema" in result.stderr


def test_the_admission_policy_where_the_api_exists(helm: Path) -> None:
    # Without the API known, only the workloads' opaque-configuration policy (tests/packaging).
    (alone,) = of_kind(objects(helm), "ValidatingAdmissionPolicy")
    assert alone["metadata"]["name"] == "dracpu-dra-driver-cpu-opaque-config"
    found = objects(helm, "--api-versions", VAP)
    # The third policy is the workloads' opaque configurations (tests/packaging).
    policy, claims, _ = of_kind(found, "ValidatingAdmissionPolicy")
    bindings = of_kind(found, "ValidatingAdmissionPolicyBinding")
    assert [b["spec"]["policyName"] for b in bindings] == [
        policy["metadata"]["name"],
        claims["metadata"]["name"],
        "dracpu-dra-driver-cpu-opaque-config",
    ]
    assert all(b["spec"]["validationActions"] == ["Deny"] for b in bindings)
    spec = policy["spec"]
    assert spec["matchConstraints"]["resourceRules"][0]["resources"] == ["resourceslices"]
    assert "system:serviceaccount:kube-system:dracpu" in spec["matchConditions"][0]["expression"]
    text = yaml.safe_dump(spec)
    assert "authentication.kubernetes.io/node-name" in text
    assert "spec.driver == 'dra.cpu'" in text and "spec.nodeName" in text
    # Claims: status updates only, of the same ServiceAccount, our entries on our node.
    spec = claims["spec"]
    (rule,) = spec["matchConstraints"]["resourceRules"]
    assert (rule["resources"], rule["operations"]) == (["resourceclaims/status"], ["UPDATE"])
    assert "system:serviceaccount:kube-system:dracpu" in spec["matchConditions"][0]["expression"]
    text = " ".join(item["expression"] for item in spec["variables"] + spec["validations"])
    assert "authentication.kubernetes.io/node-name" in text and "d.driver != 'dra.cpu'" in text
    assert "metadata.name" in text and "status.allocation == oldObject.status.allocation" in text
    off = objects(helm, "--api-versions", VAP, "--set", "rbac.admissionPolicy=false")
    assert [p["metadata"]["name"] for p in of_kind(off, "ValidatingAdmissionPolicy")] == [
        "dracpu-dra-driver-cpu-opaque-config"
    ]
