"""A values file written for the reference driver's chart works with ours, with the same
meaning: its single `image`, `resources`, `extraVolumes`/`extraVolumeMounts`,
`healthzPath`/`healthzPort` and the `driverConfig` keys it knows; our per-service keys win
where both are given, and the schema stays strict for everything else.

The reference's own files (its chart's values.yaml and its sysfs-overlay example) are
rendered too when a checkout of the reference is at hand (DRACPU_REFERENCE_REPO, a git
directory); the inline copies below carry the same keys and defaults.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from helm_chart import KUBE_VERSION, SERVICES, Rendered, RenderError, flags, mount_for, render

from dracpu.core.config import DriverConfig, parse_document

APP_VERSION = yaml.safe_load(
    (Path(__file__).resolve().parents[2] / "helm/dra-driver-cpu/Chart.yaml").read_text()
)["appVersion"]
CONFIG_FILE = "/etc/dracpu/config.yaml"
SCHEMA_RELEASES = (KUBE_VERSION, "1.37.0")

# The reference chart's values.yaml: every key, at its default.
REFERENCE_VALUES: dict[str, Any] = {
    "nameOverride": "",
    "fullnameOverride": "",
    "image": {
        "repository": "registry.k8s.io/dra-driver-cpu/dra-driver-cpu",
        "tag": "",
        "pullPolicy": "IfNotPresent",
    },
    "imagePullSecrets": [],
    "rbac": {"create": True},
    "serviceAccount": {"annotations": {}},
    "podAnnotations": {},
    "podLabels": {},
    "extraVolumeMounts": [],
    "extraVolumes": [],
    "resources": {"requests": {"cpu": "100m", "memory": "50Mi"}, "limits": {}},
    "tolerations": [{"operator": "Exists", "effect": "NoSchedule"}],
    "nodeSelector": {},
    "affinity": {},
    "args": {
        "logLevel": 4,
        "cpuDeviceMode": "",
        "groupBy": "",
        "reservedCPUs": "",
        "hostnameOverride": "",
        "exposePCIeRoots": False,
    },
    "healthzPath": "/healthz",
    "healthzPort": 8080,
    "kubeletRootDir": "/var/lib/kubelet",
    "driverConfig": {},
}

# The reference's hack/examples/sysfs-overlay/values.yaml.
OVERLAY_FILE = "/etc/dra-driver-cpu/sysfs-overlay.yaml"
REFERENCE_OVERLAY_VALUES: dict[str, Any] = {
    "args": {"exposePCIeRoots": True},
    "driverConfig": {"sysfsOverlay": OVERLAY_FILE},
    "extraVolumeMounts": [
        {
            "name": "sysfs-overlay",
            "mountPath": OVERLAY_FILE,
            "subPath": "sysfs-overlay.yaml",
            "readOnly": True,
        }
    ],
    "extraVolumes": [
        {"name": "sysfs-overlay", "configMap": {"name": "dra-driver-cpu-sysfs-overlay-example"}}
    ],
}

REFERENCE_REPO = Path(
    os.environ.get("DRACPU_REFERENCE_REPO", "/work/.mirror/kubernetes-sigs+dra-driver-cpu/repo")
)
REFERENCE_FILES = {
    "values": "deployment/helm/dra-driver-cpu/values.yaml",
    "sysfs-overlay": "hack/examples/sysfs-overlay/values.yaml",
}


def reference_file(name: str) -> dict[str, Any]:
    if not (REFERENCE_REPO / "HEAD").exists():
        pytest.skip(f"no reference checkout at {REFERENCE_REPO} (set DRACPU_REFERENCE_REPO)")
    text = subprocess.run(
        ["git", "-C", str(REFERENCE_REPO), "show", f"HEAD:{REFERENCE_FILES[name]}"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    values = yaml.safe_load(text)
    assert isinstance(values, dict)
    return values


def assert_valid(rendered: Rendered) -> None:
    for release in SCHEMA_RELEASES:
        for obj in rendered.objects:
            assert kubernetes_validate.validate(obj, release, strict=True)


def check_reference_defaults(rendered: Rendered, image: str) -> None:
    assert_valid(rendered)
    for name in SERVICES:
        container = rendered.container(name)
        assert container["image"] == f"{image}:{APP_VERSION}"
        assert container["imagePullPolicy"] == "IfNotPresent"
        # The reference's one container's resources, for each of ours; no limits, as there.
        assert container["resources"] == {"requests": {"cpu": "100m", "memory": "50Mi"}}
        assert flags(container["args"])["-v"] == "4"
    api = rendered.container("api")
    assert api["ports"][0]["containerPort"] == 8080
    assert flags(api["args"])["--bind-address"] == ":8080"
    assert api["livenessProbe"]["httpGet"]["path"] == "/healthz"


def check_overlay_example(rendered: Rendered) -> None:
    assert_valid(rendered)
    config = yaml.safe_load(rendered.one("ConfigMap")["data"]["config.yaml"])
    assert config["sysfsOverlay"] == OVERLAY_FILE
    parse_document(config, "rendered config")  # every service accepts it
    assert rendered.volume("sysfs-overlay") == {
        "name": "sysfs-overlay",
        "configMap": {"name": "dra-driver-cpu-sysfs-overlay-example"},
    }
    for name in SERVICES:
        mount = mount_for(rendered.container(name), OVERLAY_FILE)
        assert mount is not None and mount["name"] == "sysfs-overlay" and mount["readOnly"]
    assert "--expose-pcie-roots" in flags(rendered.container("allocator")["args"])


def test_the_reference_values_keep_their_meaning(helm: Path) -> None:
    check_reference_defaults(
        render(helm, REFERENCE_VALUES), "registry.k8s.io/dra-driver-cpu/dra-driver-cpu"
    )


def test_the_reference_overlay_example_keeps_its_meaning(helm: Path) -> None:
    check_overlay_example(render(helm, REFERENCE_OVERLAY_VALUES))


def test_the_reference_chart_values_file_itself(helm: Path) -> None:
    values = reference_file("values")
    check_reference_defaults(render(helm, values), values["image"]["repository"])


def test_the_reference_overlay_example_file_itself(helm: Path) -> None:
    # As its README installs it: the example's values over the chart's own defaults.
    check_overlay_example(render(helm, reference_file("sysfs-overlay")))


def test_our_per_service_keys_win_over_the_reference_keys(helm: Path) -> None:
    rendered = render(
        helm,
        {
            **REFERENCE_VALUES,
            "topology": {
                "image": {"repository": "mirror/topology", "tag": "t1", "pullPolicy": "Always"},
                "resources": {"requests": {"cpu": "5m"}},
            },
            "api": {"port": 9090},
        },
    )
    topology = rendered.container("topology")
    assert topology["image"] == "mirror/topology:t1"
    assert topology["imagePullPolicy"] == "Always"
    assert topology["resources"] == {"requests": {"cpu": "5m"}}
    allocator = rendered.container("allocator")
    assert allocator["image"] == f"registry.k8s.io/dra-driver-cpu/dra-driver-cpu:{APP_VERSION}"
    assert allocator["resources"] == {"requests": {"cpu": "100m", "memory": "50Mi"}}
    api = rendered.container("api")
    assert flags(api["args"])["--bind-address"] == ":9090"
    assert api["ports"][0]["containerPort"] == 9090


def test_without_the_reference_keys_each_service_has_its_own_defaults(helm: Path) -> None:
    rendered = render(helm)
    for name in SERVICES:
        container = rendered.container(name)
        assert container["image"] == f"localhost/dracpu-{name}:{APP_VERSION}"
        assert container["resources"]["requests"]["cpu"] in ("10m", "20m")
        assert "memory" in container["resources"]["limits"]
    assert rendered.container("api")["ports"][0]["containerPort"] == 8080


def test_healthz_port_and_path_move_the_api(helm: Path) -> None:
    rendered = render(helm, {"healthzPort": 8181, "healthzPath": "/healthz"})
    api = rendered.container("api")
    assert flags(api["args"])["--bind-address"] == ":8181"
    assert api["ports"] == [{"name": "http", "containerPort": 8181, "protocol": "TCP"}]
    policy = rendered.one("NetworkPolicy")
    assert policy["spec"]["ingress"][0]["ports"][0]["port"] == 8181


def test_a_kubeconfig_in_driver_config_reaches_the_config_file(helm: Path) -> None:
    rendered = render(helm, {"driverConfig": {"kubeconfig": "/etc/kube/config"}})
    assert yaml.safe_load(rendered.one("ConfigMap")["data"]["config.yaml"])["kubeconfig"] == (
        "/etc/kube/config"
    )


def test_the_memory_placement_in_driver_config_reaches_the_config_file(helm: Path) -> None:
    rendered = render(helm, {"driverConfig": {"memoryPlacement": "local"}})
    document = yaml.safe_load(rendered.one("ConfigMap")["data"]["config.yaml"])
    assert document["memoryPlacement"] == "local"
    DriverConfig.model_validate(document)  # every service reads it as it is
    default = yaml.safe_load(render(helm).one("ConfigMap")["data"]["config.yaml"]) or {}
    assert "memoryPlacement" not in default  # unset: the services' default, none


@pytest.mark.parametrize(
    ("values", "fragment"),
    [
        ({"imagee": {}}, "imagee"),
        ({"image": {"repo": "x"}}, "repo"),
        ({"image": {"pullPolicy": "Sometimes"}}, "/image/pullPolicy"),
        ({"resources": {"request": {}}}, "request"),
        ({"healthzPort": 0}, "healthzPort"),
        ({"healthzPath": "healthz"}, "healthzPath"),
        ({"driverConfig": {"sysfsOverlayy": "/x"}}, "sysfsOverlayy"),
        ({"driverConfig": {"sysfsRoot": "/x"}}, "sysfsRoot"),
        ({"extraVolumes": {"name": "x"}}, "extraVolumes"),
        ({"extraVolumeMounts": [{"name": "x"}]}, "mountPath"),
        ({"args": {"loggingFormat": "xml"}}, "/args/loggingFormat"),
        ({"draPlugin": {"metadataVersions": ["v2"]}}, "/draPlugin/metadataVersions"),
    ],
)
def test_the_schema_stays_strict(helm: Path, values: dict[str, Any], fragment: str) -> None:
    with pytest.raises(RenderError) as refused:
        render(helm, values)
    assert fragment in str(refused.value)


def test_every_container_reads_config_as_one_argument_from_the_reference_configmap(
    helm: Path,
) -> None:
    # As the reference's scripts read it: `--config=<path>` in the first container's args,
    # and the ConfigMap `<daemonset name>-config` with key config.yaml.
    rendered = render(helm, {"fullnameOverride": "dracpu"})
    daemonset = rendered.one("DaemonSet")
    for container in rendered.pod["containers"]:
        assert f"--config={CONFIG_FILE}" in container["args"]
        assert "--config" not in container["args"]
    first = rendered.pod["containers"][0]
    path = next(a for a in first["args"] if a.startswith("--config=")).partition("=")[2]
    config_map = rendered.one("ConfigMap")
    assert config_map["metadata"]["name"] == f"{daemonset['metadata']['name']}-config"
    assert config_map["metadata"]["name"] == "dracpu-config"
    assert path.rpartition("/")[2] in config_map["data"]


def test_the_default_container_is_the_one_with_dracpu_and_gatherinfo(helm: Path) -> None:
    rendered = render(helm)
    annotations = rendered.one("DaemonSet")["spec"]["template"]["metadata"]["annotations"]
    assert annotations["kubectl.kubernetes.io/default-container"] == "topology"
    dockerfile = (Path(__file__).resolve().parents[2] / "Dockerfile").read_text()
    topology = dockerfile.split("AS topology\n", 1)[1].split("\nFROM ", 1)[0]
    assert "ln -s /opt/dracpu/bin/dracpu /dracpu" in topology
    assert "ln -s /opt/dracpu/bin/dracpu-gatherinfo /dracpu-gatherinfo" in topology


@pytest.mark.parametrize(("fmt", "expected"), [(None, None), ("text", None), ("json", "json")])
def test_the_log_format_reaches_every_service(
    helm: Path, fmt: str | None, expected: str | None
) -> None:
    # The services' default (text) is not passed, so an image one release behind, which has
    # no --logging-format, still starts under this chart.
    rendered = render(helm, {"args": {"loggingFormat": fmt}} if fmt else {})
    for name in SERVICES:
        assert flags(rendered.container(name)["args"]).get("--logging-format") == expected


def test_metadata_versions(helm: Path) -> None:
    default = flags(render(helm).container("dra-plugin")["args"])
    assert "--metadata-versions" not in default  # the dra-plugin's default: v1beta1 alone
    stream = render(helm, {"draPlugin": {"metadataVersions": ["v1beta1", "v1alpha1"]}})
    assert flags(stream.container("dra-plugin")["args"])["--metadata-versions"] == (
        "v1beta1,v1alpha1"
    )
