"""What the chart grants and refuses: minimal RBAC, least-privilege containers, host paths only
where a service needs them, and bad values stopped by the schema with its message."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from helm_chart import (
    INSTALL_HELM,
    KUBE_VERSION,
    SERVICES,
    Rendered,
    RenderError,
    lint,
    notes,
    pinned_helm_version,
    render,
)

from dracpu.core.config import parse_document
from dracpu.core.errors import DracpuError


@pytest.fixture(scope="module")
def default(helm: Path) -> Rendered:
    return render(helm)


def test_helm_is_the_pinned_release_and_reinstalling_is_a_no_op(helm: Path) -> None:
    version = subprocess.run(
        [str(helm), "version", "--template", "{{ .Version }}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert version == pinned_helm_version()
    built = helm.stat().st_mtime_ns
    again = subprocess.run(["bash", str(INSTALL_HELM)], capture_output=True, text=True, check=False)
    assert (again.returncode, again.stderr) == (0, "")
    assert helm.stat().st_mtime_ns == built


def test_lint_passes_strict(helm: Path) -> None:
    result = lint(helm)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 chart(s) failed" in result.stdout


def test_lint_fails_on_bad_values(helm: Path) -> None:
    result = lint(helm, {"kubeletRootDir": "relative/kubelet"})
    assert result.returncode != 0
    assert "does not match pattern '^/'" in result.stdout + result.stderr


def test_validator_rejects_a_broken_object(default: Rendered) -> None:
    # The schema check must be able to fail: a misspelt field is refused in strict mode.
    daemonset = default.one("DaemonSet")
    broken: dict[str, Any] = {**daemonset, "spec": {**daemonset["spec"], "updateStrategyy": {}}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBE_VERSION, strict=True)
    device_class = default.one("DeviceClass")
    no_cel = {**device_class, "spec": {"selectors": [{"cel": {"expr": "true"}}]}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(no_cel, KUBE_VERSION, strict=True)


def test_rbac_is_what_the_dra_plugin_needs(default: Rendered) -> None:
    rules = default.one("ClusterRole")["rules"]
    granted = {
        (group, resource, verb)
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    slices = {
        ("resource.k8s.io", "resourceslices", verb)
        for verb in ("get", "list", "watch", "create", "update", "delete")
    }
    assert granted == slices | {
        ("resource.k8s.io", "resourceclaims", "get"),
        ("resource.k8s.io", "resourceclaims/status", "patch"),
        ("resource.k8s.io", "resourceclaims/driver", "associated-node:patch"),
        ("", "nodes", "get"),
        ("", "events", "create"),
    }
    # Only the synthetic per-driver permission names anything: our driver, and no other.
    named = [rule for rule in rules if "resourceNames" in rule]
    assert named == [
        {
            "apiGroups": ["resource.k8s.io"],
            "resources": ["resourceclaims/driver"],
            "resourceNames": ["dra.cpu"],
            "verbs": ["associated-node:patch"],
        }
    ]
    binding = default.one("ClusterRoleBinding")
    account = default.one("ServiceAccount")
    assert binding["roleRef"]["name"] == default.one("ClusterRole")["metadata"]["name"]
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": account["metadata"]["name"],
            "namespace": account["metadata"]["namespace"],
        }
    ]
    assert default.pod["serviceAccountName"] == account["metadata"]["name"]


def test_only_the_dra_plugin_gets_an_api_token(default: Rendered) -> None:
    assert default.pod["automountServiceAccountToken"] is False
    assert default.one("ServiceAccount")["automountServiceAccountToken"] is False
    holders = [
        container["name"]
        for container in default.pod["containers"]
        for mount in container["volumeMounts"]
        if mount["mountPath"] == "/var/run/secrets/kubernetes.io/serviceaccount"
    ]
    assert holders == ["dra-plugin"]
    sources = default.volume("kube-api-access")["projected"]["sources"]
    assert any("serviceAccountToken" in source for source in sources)


# The host directories each container may touch; everything else it sees is the pod's own.
HOST_PATHS = {
    "topology": {"/sys"},
    "allocator": {"/var/lib/dracpu", "/var/run/cdi"},
    "dra-plugin": {
        "/var/lib/kubelet",  # read-only: the CPU and Memory Managers' checkpoints
        "/var/lib/kubelet/plugins/dra.cpu",
        "/var/lib/kubelet/plugins_registry/dra.cpu",
        "/var/run/cdi",
    },
    "nri-plugin": {"/var/run/nri"},
    "api": set(),
}


@pytest.mark.parametrize("name", SERVICES)
def test_host_paths_are_only_where_needed(default: Rendered, name: str) -> None:
    container = default.container(name)
    host_paths = set()
    for mount in container["volumeMounts"]:
        volume = default.volume(mount["name"])
        if "hostPath" in volume:
            host_paths.add(volume["hostPath"]["path"])
            if volume["hostPath"]["path"] in ("/sys", "/var/run/nri", "/var/lib/kubelet"):
                assert mount["readOnly"] is True, f"{volume['hostPath']['path']} must be read-only"
    assert host_paths == HOST_PATHS[name]


@pytest.mark.parametrize("name", SERVICES)
def test_containers_are_least_privilege(default: Rendered, name: str) -> None:
    context = default.container(name)["securityContext"]
    assert context["allowPrivilegeEscalation"] is False
    assert context["readOnlyRootFilesystem"] is True
    assert context["privileged"] is False
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert context["seccompProfile"] == {"type": "RuntimeDefault"}
    if name in ("topology", "api"):
        assert context["runAsNonRoot"] is True
        assert context["runAsUser"] != 0
    else:
        # uid 0 only to own files in root-owned host dirs; no capability comes with it.
        assert context["runAsUser"] == 0


def test_pod_shares_nothing_of_the_host_but_the_mounts(default: Rendered) -> None:
    pod = default.pod
    assert pod["hostNetwork"] is False
    assert pod["hostPID"] is False
    assert pod["hostIPC"] is False
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    # The socket volume's group, shared by the root and non-root containers.
    assert pod["securityContext"]["fsGroup"] == 65532


BAD_VALUES = {
    "empty-kubelet-root": (
        {"kubeletRootDir": ""},
        "at '/kubeletRootDir': minLength: got 0, want 1",
    ),
    "relative-kubelet-root": (
        {"kubeletRootDir": "var/lib/kubelet"},
        "at '/kubeletRootDir': 'var/lib/kubelet' does not match pattern '^/'",
    ),
    "unknown-device-mode": (
        {"driverConfig": {"cpuDeviceMode": "percore"}},
        "at '/driverConfig/cpuDeviceMode': value must be one of 'grouped', 'individual'",
    ),
    "unknown-device-mode-deprecated-arg": (
        {"args": {"cpuDeviceMode": "percore"}},
        "at '/args/cpuDeviceMode': value must be one of '', 'grouped', 'individual'",
    ),
    "unknown-group-by": (
        {"driverConfig": {"groupBy": "core"}},
        "at '/driverConfig/groupBy': value must be one of 'numanode', 'socket', 'machine'",
    ),
    "unknown-allocator": (
        {"driverConfig": {"allocator": "scheduler"}},
        "at '/driverConfig/allocator': value must be one of 'cpumanager', 'external'",
    ),
    "unknown-memory-placement": (
        {"driverConfig": {"memoryPlacement": "strict"}},
        "at '/driverConfig/memoryPlacement': value must be one of 'local', 'none'",
    ),
    "bad-reserved-cpus": (
        {"driverConfig": {"reservedCPUs": "0-1,x"}},
        "at '/driverConfig/reservedCPUs': '0-1,x' does not match pattern",
    ),
    "chart-owned-config-field": (
        {"driverConfig": {"sysfsRoot": "/host/sys"}},
        "at '/driverConfig': additional properties 'sysfsRoot' not allowed",
    ),
    "image-registry-trailing-slash": (
        {"imageRegistry": "registry.example/dracpu/"},
        "at '/imageRegistry': 'registry.example/dracpu/' does not match pattern",
    ),
    "image-registry-with-a-space": (
        {"imageRegistry": "registry.example dracpu"},
        "at '/imageRegistry': 'registry.example dracpu' does not match pattern",
    ),
    "misspelt-value": (
        {"kubeletRootdir": "/var/lib/kubelet"},
        "additional properties 'kubeletRootdir' not allowed",
    ),
    "port-out-of-range": ({"api": {"port": 70000}}, "at '/api/port': maximum: got 70,000"),
    "backend-timeout-zero": (
        {"api": {"backendTimeout": 0}},
        "at '/api/backendTimeout': exclusiveMinimum: got 0, want 0",
    ),
    "backend-timeout-above-a-minute": (
        {"api": {"backendTimeout": 61}},
        "at '/api/backendTimeout': maximum: got 61, want 60",
    ),
    "pcie-roots-not-boolean": (
        {"args": {"exposePCIeRoots": "yes"}},
        "at '/args/exposePCIeRoots': got string, want boolean",
    ),
    "max-surge-refused": (
        {"updateStrategy": {"rollingUpdate": {"maxSurge": 1}}},
        "at '/updateStrategy/rollingUpdate': additional properties 'maxSurge' not allowed",
    ),
    "bad-pull-policy": (
        {"imagePullPolicy": "Sometimes"},
        "at '/imagePullPolicy': value must be one of",
    ),
    "min-shared-cpus-above-what-the-services-accept": (
        {"driverConfig": {"minSharedCPUs": 70000}},
        "at '/driverConfig/minSharedCPUs': maximum: got 70,000, want 65,536",
    ),
    "negative-min-shared-cpus": (
        {"driverConfig": {"minSharedCPUs": -1}},
        "at '/driverConfig/minSharedCPUs': minimum: got -1, want 0",
    ),
}


@pytest.mark.parametrize("values, message", BAD_VALUES.values(), ids=BAD_VALUES.keys())
def test_bad_values_fail_with_the_schemas_message(
    helm: Path, values: dict[str, Any], message: str
) -> None:
    with pytest.raises(RenderError) as refused:
        render(helm, values)
    assert "values don't meet the specifications of the schema" in str(refused.value)
    assert message in str(refused.value)


def test_min_shared_cpus_through_set_is_refused_naming_the_field(helm: Path) -> None:
    with pytest.raises(RenderError, match=r"/driverConfig/minSharedCPUs': maximum"):
        render(helm, set_args=("driverConfig.minSharedCPUs=70000",))


@pytest.mark.parametrize("count", [0, 1, 65536, 65537, -1])
def test_the_schema_takes_the_min_shared_cpus_the_services_take(helm: Path, count: int) -> None:
    """The chart and the config loader every service runs at start agree on each value."""
    try:
        parse_document({"minSharedCPUs": count}, "values")
        loader_accepts = True
    except DracpuError:
        loader_accepts = False
    try:
        render(helm, {"driverConfig": {"minSharedCPUs": count}})
        chart_accepts = True
    except RenderError:
        chart_accepts = False
    assert chart_accepts == loader_accepts


def test_empty_kubelet_root_through_set_is_refused(helm: Path) -> None:
    with pytest.raises(RenderError, match="minLength: got 0, want 1"):
        render(helm, set_args=("kubeletRootDir=",))


def test_kubelet_root_too_long_for_a_socket_path(helm: Path) -> None:
    root = "/" + "k" * 80
    with pytest.raises(RenderError) as refused:
        render(helm, {"kubeletRootDir": root})
    assert "is too long: the registration socket" in str(refused.value)
    assert "over the 107 a unix socket path can hold" in str(refused.value)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"driverConfig": {"groupBy": "machine"}},
            "driverConfig: groupBy 'machine' needs allocator 'external' (got \"cpumanager\")",
        ),
        (
            {"driverConfig": {"allocator": "cpumanager"}, "args": {"groupBy": "machine"}},
            "driverConfig: groupBy 'machine' needs allocator 'external' (got \"cpumanager\")",
        ),
        (
            {"driverConfig": {"cpuDeviceMode": "individual", "allocator": "external"}},
            "driverConfig: allocator 'external' needs cpuDeviceMode 'grouped' (got \"individual\")",
        ),
    ],
    ids=["machine-without-external", "machine-through-deprecated-arg", "individual-external"],
)
def test_allocator_combinations_the_driver_refuses_fail_the_install(
    helm: Path, values: dict[str, Any], message: str
) -> None:
    with pytest.raises(RenderError) as refused:
        render(helm, values)
    assert message in str(refused.value)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"probes": {"ports": {"nriPlugin": 8091}}},
            "probes.ports.nriPlugin 8091 is also the port of probes.ports.topology",
        ),
        ({"api": {"port": 8092}}, "probes.ports.allocator 8092 is also the port of the api"),
    ],
    ids=["two-probe-listeners", "probe-listener-on-the-api-port"],
)
def test_a_port_shared_by_two_listeners_fails_the_install(
    helm: Path, values: dict[str, Any], message: str
) -> None:
    with pytest.raises(RenderError) as refused:
        render(helm, values)
    assert message in str(refused.value)
    # Without probe listeners (exec probes) the same api port is fine.
    if "api" in values:
        render(helm, {**values, "probes": {"handler": "exec"}})


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"probes": {"handler": "grpc"}}, "value must be one of 'http', 'exec'"),
        ({"probes": {"liveness": {"timeoutSeconds": 0}}}, "minimum: got 0, want 1"),
        ({"probes": {"startup": {"timeout": 5}}}, "additional properties 'timeout' not allowed"),
        ({"topology": {"probes": {"readiness": {}}}}, "additional properties 'readiness'"),
        ({"probes": {"ports": {"api": 9000}}}, "additional properties 'api' not allowed"),
    ],
    ids=["handler", "zero-timeout", "misspelt-field", "readiness-of-a-grpc-service", "api-port"],
)
def test_bad_probe_values_are_refused_by_the_schema(
    helm: Path, values: dict[str, Any], message: str
) -> None:
    with pytest.raises(RenderError) as refused:
        render(helm, values)
    assert message in str(refused.value)


def test_existing_service_account_must_be_named(helm: Path) -> None:
    with pytest.raises(RenderError, match=r"serviceAccount\.name must name an existing"):
        render(helm, {"serviceAccount": {"create": False}})
    rendered = render(helm, {"serviceAccount": {"create": False, "name": "dracpu-sa"}})
    assert rendered.of_kind("ServiceAccount") == []
    assert rendered.pod["serviceAccountName"] == "dracpu-sa"


def test_notes_tell_how_to_check_the_install(helm: Path) -> None:
    text = notes(helm)
    assert "kubectl -n kube-system rollout status daemonset/dracpu-dra-driver-cpu" in text
    assert "kubectl get resourceslices --field-selector spec.driver=dra.cpu" in text
    assert "curl -s http://127.0.0.1:8080/readyz" in text
    assert "DRAListTypeAttributes" not in text
    assert "DEPRECATED" not in text
    assert "Allocator external" not in text


def test_notes_deprecate_individual_mode_with_the_way_out(helm: Path) -> None:
    text = notes(helm, {"driverConfig": {"cpuDeviceMode": "individual"}})
    assert "DEPRECATED: cpuDeviceMode individual" in text
    assert "use cpuDeviceMode grouped with allocator external" in text
    assert '"Migrate from individual mode" in docs/user/configuration.md' in text
    # Through the deprecated arg too: the notes read the effective configuration.
    assert "DEPRECATED: cpuDeviceMode individual" in notes(
        helm, {"args": {"cpuDeviceMode": "individual"}}
    )


def test_notes_tell_an_external_allocator_what_to_read(helm: Path) -> None:
    text = notes(helm, {"driverConfig": {"groupBy": "socket", "allocator": "external"}})
    assert "dra.cpu/cpuIDs and dra.cpu/smtLayout" in text
    assert "cpuDeviceMode individual" not in text


def test_notes_warn_about_feature_gates_and_deprecated_values(helm: Path) -> None:
    text = notes(
        helm,
        {
            "args": {"exposePCIeRoots": True, "groupBy": "socket"},
            "driverConfig": {"publishNodeAllocatableResourceMapping": True},
            "api": {"port": 9000},
        },
    )
    assert "DRAListTypeAttributes feature gate" in text
    assert "DRANodeAllocatableResources feature gate" in text
    assert "DEPRECATED: args.cpuDeviceMode/groupBy/reservedCPUs/hostnameOverride" in text
    assert "curl -s http://127.0.0.1:9000/readyz" in text


def test_notes_warn_loudly_that_host_network_drops_the_network_policy(helm: Path) -> None:
    text = notes(helm, {"hostNetwork": True})
    assert "WARNING: NO NETWORKPOLICY GUARDS THE API" in text
    assert "ports 8080, 8091, 8092, 8093, 8094" in text
    assert "The api's port with hostNetwork" in text
    assert (
        "8091"
        not in notes(helm, {"hostNetwork": True, "probes": {"handler": "exec"}}).split("WARNING")[1]
    )
    assert "WARNING" not in notes(helm)
    assert "WARNING" not in notes(
        helm, {"hostNetwork": True, "api": {"networkPolicy": {"enabled": False}}}
    )


# ---- the uninstall check (a pre-delete hook) -------------------------------------------------


def test_the_uninstall_check_is_a_pre_delete_job_in_the_dra_plugins_image(
    default: Rendered,
) -> None:
    assert sorted(obj["kind"] for obj in default.hooks) == [
        "ClusterRole", "ClusterRoleBinding", "Job", "ServiceAccount"
    ]  # fmt: skip
    for obj in default.hooks:
        annotations = obj["metadata"]["annotations"]
        assert annotations["helm.sh/hook"] == "pre-delete"
        # Kept after a refusal (with the Job's log) until the next attempt replaces it.
        assert annotations["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
        assert kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)
    job = default.hook("Job")
    assert job["metadata"]["annotations"]["helm.sh/hook-output-log-policy"] == "hook-failed"
    assert job["spec"]["backoffLimit"] == 0
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["dracpu", "uninstall-check"]
    assert container["image"] == default.container("dra-plugin")["image"]
    assert pod["serviceAccountName"] == default.hook("ServiceAccount")["metadata"]["name"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    # Not one of the driver's pods to the DaemonSet, the NetworkPolicy or a monitor.
    selector = default.one("DaemonSet")["spec"]["selector"]["matchLabels"]
    labels = job["spec"]["template"]["metadata"]["labels"]
    assert not all(labels.get(k) == v for k, v in selector.items())


def test_the_uninstall_checks_account_lists_claims_and_pods_only(default: Rendered) -> None:
    rules = default.hook("ClusterRole")["rules"]
    granted = {
        (group, resource, verb)
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert granted == {("resource.k8s.io", "resourceclaims", "list"), ("", "pods", "list")}
    binding = default.hook("ClusterRoleBinding")
    account = default.hook("ServiceAccount")
    assert binding["roleRef"]["name"] == default.hook("ClusterRole")["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["metadata"]["name"],
         "namespace": account["metadata"]["namespace"]}
    ]  # fmt: skip
    assert account["metadata"]["name"] != default.one("ServiceAccount")["metadata"]["name"]


def test_the_uninstall_check_can_be_turned_off(helm: Path) -> None:
    assert render(helm, {"uninstallCheck": {"enabled": False}}).hooks == []


def test_the_kubelet_state_check_mounts_the_kubelet_root_read_only_and_can_be_turned_off(
    helm: Path,
) -> None:
    def root_mounts(values: dict[str, Any]) -> list[dict[str, Any]]:
        rendered = render(helm, values)
        mounts = rendered.container("dra-plugin")["volumeMounts"]
        return [m for m in mounts if m["mountPath"] == "/var/lib/kubelet"]

    assert root_mounts({}) == [
        {"name": "kubelet-root", "mountPath": "/var/lib/kubelet", "readOnly": True}
    ]
    assert root_mounts({"kubeletStateCheck": {"enabled": False}}) == []
    off = render(helm, {"kubeletStateCheck": {"enabled": False}})
    assert "kubelet-root" not in {v["name"] for v in off.pod["volumes"]}
