"""The chart, rendered by the real helm binary over a matrix of values: every object is valid
Kubernetes (OpenAPI schemas of a pinned release), and the pod holds together — five containers,
every path flag backed by a mount, one socket path per service, least privilege."""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from helm_chart import (
    CHART,
    GRPC_SERVICES,
    KUBE_VERSION,
    SERVICES,
    Rendered,
    flags,
    lint,
    mount_for,
    render,
)

from dracpu.core.config import parse_document

APP_VERSION = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
SOCKET_DIR = "/run/dracpu"
CONFIG_FILE = "/etc/dracpu/config.yaml"


@dataclass(frozen=True)
class Case:
    values: dict[str, Any]
    check: Callable[[Rendered], None]
    set_args: tuple[str, ...] = field(default=())


def _flags_of(rendered: Rendered, name: str) -> dict[str, str]:
    return flags(rendered.container(name)["args"])


def _host_path(rendered: Rendered, container: str, path: str) -> str:
    """The host path behind `path` in a container, through its hostPath mount."""
    mount = mount_for(rendered.container(container), path)
    assert mount is not None, f"{container}: nothing mounted at {path}"
    host = rendered.volume(mount["name"])["hostPath"]["path"]
    return str(host) + path[len(mount["mountPath"].rstrip("/")) :]


def check_defaults(r: Rendered) -> None:
    assert r.config_file() == {"apiVersion": "v1alpha1"}
    assert "--expose-pcie-roots" not in _flags_of(r, "allocator")
    assert _flags_of(r, "dra-plugin")["--kubelet-root-dir"] == "/var/lib/kubelet"
    assert _flags_of(r, "api")["--backend-timeout"] == "1"
    for name in SERVICES:
        assert r.container(name)["image"] == f"localhost/dracpu-{name}:{APP_VERSION}"
        assert _flags_of(r, name)["-v"] == "2"
    assert r.pod["hostNetwork"] is False
    assert r.one("DaemonSet")["spec"]["updateStrategy"]["type"] == "RollingUpdate"
    assert r.pod["affinity"] == {"nodeAffinity": _required_terms([{"matchExpressions": [AMD64]}])}


# The architectures tools/build-images.sh builds for, as Kubernetes names them.
ARCH_OF_WHEEL_PLATFORM = {"x86_64": "amd64", "aarch64": "arm64"}
AMD64 = {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}


def _required_terms(terms: list[dict[str, Any]]) -> dict[str, Any]:
    return {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}


def check_user_affinity_keeps_architectures(r: Rendered) -> None:
    arch = {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64", "arm64"]}
    # Terms are ORed: each gets the requirement, so none matches a node the images cannot run on.
    assert r.pod["affinity"] == {
        "nodeAffinity": _required_terms(
            [
                {"matchExpressions": [{"key": "pool", "operator": "Exists"}, arch]},
                {
                    "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}],
                    "matchExpressions": [arch],
                },
            ]
        ),
        "podAntiAffinity": {},
    }


def check_no_architecture_requirement(r: Rendered) -> None:
    assert "affinity" not in r.pod


def check_individual(r: Rendered) -> None:
    assert r.config_file()["cpuDeviceMode"] == "individual"


def check_group_by(group: str, allocator: str | None = None) -> Callable[[Rendered], None]:
    def check(r: Rendered) -> None:
        assert r.config_file().get("cpuDeviceMode", "grouped") == "grouped"
        assert r.config_file()["groupBy"] == group
        assert r.config_file().get("allocator") == allocator

    return check


def check_backend_timeout(r: Rendered) -> None:
    assert _flags_of(r, "api")["--backend-timeout"] == "2.5"


def check_pcie_roots(r: Rendered) -> None:
    assert "--expose-pcie-roots" in _flags_of(r, "allocator")
    for name in ("topology", "dra-plugin", "nri-plugin", "api"):
        assert "--expose-pcie-roots" not in _flags_of(r, name)


def check_kubelet_root(r: Rendered) -> None:
    assert _flags_of(r, "dra-plugin")["--kubelet-root-dir"] == "/mnt/data/kubelet"
    assert _host_path(r, "dra-plugin", "/mnt/data/kubelet/plugins/dra.cpu/dra.sock") == (
        "/mnt/data/kubelet/plugins/dra.cpu/dra.sock"
    )
    assert r.volume("kubelet-plugins-registry")["hostPath"]["path"] == (
        "/mnt/data/kubelet/plugins_registry/dra.cpu"
    )
    rendered_text = yaml.safe_dump_all(r.objects)
    assert "/var/lib/kubelet" not in rendered_text


def check_image_registry(r: Rendered) -> None:
    """One value moves all five images to the registry they were pushed to; a service's own
    repository still wins."""
    for name in ("allocator", "dra-plugin", "nri-plugin", "api"):
        image = r.container(name)["image"]
        assert image == f"registry.example:5000/dracpu/dracpu-{name}:{APP_VERSION}", image
    assert r.container("topology")["image"] == f"mirror.example/topology:{APP_VERSION}"


def check_image_registry_empty(r: Rendered) -> None:
    for name in SERVICES:
        assert r.container(name)["image"] == f"dracpu-{name}:{APP_VERSION}"


def check_kubelet_root_slash(r: Rendered) -> None:
    assert _flags_of(r, "dra-plugin")["--kubelet-root-dir"] == "/"
    assert r.volume("kubelet-plugins")["hostPath"]["path"] == "/plugins/dra.cpu"
    assert r.volume("kubelet-plugins-registry")["hostPath"]["path"] == "/plugins_registry/dra.cpu"


def check_images(r: Rendered) -> None:
    assert r.container("topology")["image"] == "registry.example/dracpu/topology:0.1.1"
    assert r.container("allocator")["image"] == f"localhost/dracpu-allocator:{APP_VERSION}"
    assert r.container("dra-plugin")["image"] == "localhost/dracpu-dra-plugin:0.2.0"
    assert r.container("dra-plugin")["imagePullPolicy"] == "Always"
    for name in ("topology", "allocator", "nri-plugin", "api"):
        assert r.container(name)["imagePullPolicy"] == "Never"
    assert r.pod["imagePullSecrets"] == [{"name": "regcred"}]


def check_node_allocatable(r: Rendered) -> None:
    assert r.config_file()["publishNodeAllocatableResourceMapping"] is True


# The DeviceClasses' selectors: the CPU class leaves out every device with the memory capacity,
# which every memory device has and no CPU device has; the memory class takes exactly those.
CPU_SELECTOR = 'device.driver == "dra.cpu" && !("memory" in device.capacity["dra.cpu"])'
MEMORY_SELECTOR = 'device.driver == "dra.cpu" && "memory" in device.capacity["dra.cpu"]'


def device_classes(r: Rendered) -> dict[str, dict[str, Any]]:
    return {obj["metadata"]["name"]: obj for obj in r.of_kind("DeviceClass")}


def check_memory_devices(r: Rendered) -> None:
    assert r.config_file()["publishMemoryDevices"] is True
    classes = device_classes(r)
    assert sorted(classes) == ["dra.cpu", "dra.cpu-memory"]
    memory = classes["dra.cpu-memory"]
    assert memory["apiVersion"] == "resource.k8s.io/v1"
    assert memory["spec"]["selectors"] == [{"cel": {"expression": MEMORY_SELECTOR}}]
    assert classes["dra.cpu"]["spec"]["selectors"] == [{"cel": {"expression": CPU_SELECTOR}}]


def check_memory_devices_off(r: Rendered) -> None:
    assert r.config_file()["publishMemoryDevices"] is False
    assert sorted(device_classes(r)) == ["dra.cpu"]


def check_deprecated_args_win(r: Rendered) -> None:
    assert r.config_file() == {
        "apiVersion": "v1alpha1",
        "cpuDeviceMode": "grouped",
        "groupBy": "socket",
        "reservedCPUs": "0-3",
        "hostnameOverride": "node-a",
    }


def check_host_network(r: Rendered) -> None:
    assert r.pod["hostNetwork"] is True
    assert r.pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert _flags_of(r, "api")["--bind-address"] == ":9464"
    assert r.container("api")["ports"][0]["containerPort"] == 9464


def check_on_delete(r: Rendered) -> None:
    assert r.one("DaemonSet")["spec"]["updateStrategy"] == {"type": "OnDelete"}


TIMING = ("initialDelaySeconds", "periodSeconds", "timeoutSeconds", "failureThreshold")


def timing(container: dict[str, Any], probe: str) -> tuple[int, ...]:
    return tuple(container[f"{probe}Probe"][key] for key in TIMING)


def check_default_probe_timings(r: Rendered) -> None:
    for name in GRPC_SERVICES:
        # Fast until started, then rare.
        assert timing(r.container(name), "startup") == (0, 2, 5, 60)
        assert timing(r.container(name), "liveness") == (0, 60, 5, 3)
    api = r.container("api")
    assert timing(api, "startup") == (0, 2, 5, 60)
    assert timing(api, "liveness") == (0, 20, 5, 3)
    # The kubelet's usual period: /readyz answers from the health the services push.
    assert timing(api, "readiness") == (0, 10, 5, 2)


def check_slow_node_probes(r: Rendered) -> None:
    for name in ("allocator", "dra-plugin", "nri-plugin"):
        assert timing(r.container(name), "startup") == (0, 5, 30, 120)
        assert timing(r.container(name), "liveness") == (0, 60, 30, 5)
    # A service's own field wins over the top-level one; its other fields stay.
    assert timing(r.container("topology"), "startup") == (10, 5, 30, 120)
    assert timing(r.container("topology"), "liveness") == (0, 60, 45, 5)
    api = r.container("api")
    assert timing(api, "startup") == (0, 5, 30, 120)
    assert timing(api, "liveness") == (0, 20, 30, 5)
    assert timing(api, "readiness") == (0, 10, 30, 2)


def check_exec_probes(r: Rendered) -> None:
    check_default_probe_timings(r)
    for name in GRPC_SERVICES:
        assert "--probe-address" not in _flags_of(r, name)
        assert r.container(name)["livenessProbe"]["exec"]["command"][:2] == ["dracpu", "health"]


def check_probe_ports(r: Rendered) -> None:
    wanted = {"topology": 9101, "allocator": 8092, "dra-plugin": 8093, "nri-plugin": 9104}
    for name, port in wanted.items():
        assert _flags_of(r, name)["--probe-address"] == f":{port}"
        assert r.container(name)["startupProbe"]["httpGet"]["port"] == port


CASES: dict[str, Case] = {
    "defaults": Case({}, check_defaults),
    "individual-mode": Case({"driverConfig": {"cpuDeviceMode": "individual"}}, check_individual),
    "group-by-socket": Case(
        {"driverConfig": {"cpuDeviceMode": "grouped", "groupBy": "socket"}},
        check_group_by("socket"),
    ),
    "group-by-machine": Case(
        {
            "driverConfig": {
                "cpuDeviceMode": "grouped",
                "groupBy": "machine",
                "allocator": "external",
            }
        },
        check_group_by("machine", "external"),
    ),
    # The reference's migration from individual mode: NUMA groups, CPUs picked outside.
    "numa-external-allocator": Case(
        {
            "driverConfig": {
                "cpuDeviceMode": "grouped",
                "groupBy": "numanode",
                "allocator": "external",
            }
        },
        check_group_by("numanode", "external"),
    ),
    "socket-external-allocator-flagged-group": Case(
        {"driverConfig": {"allocator": "external"}, "args": {"groupBy": "socket"}},
        check_group_by("socket", "external"),
    ),
    "pcie-roots": Case({"args": {"exposePCIeRoots": True}}, check_pcie_roots),
    "api-backend-timeout": Case({"api": {"backendTimeout": 2.5}}, check_backend_timeout),
    "relocated-kubelet-root": Case({"kubeletRootDir": "/mnt/data//kubelet/"}, check_kubelet_root),
    "kubelet-root-dotdot": Case({"kubeletRootDir": "/mnt/x/../data/kubelet"}, check_kubelet_root),
    "kubelet-root-slash": Case({"kubeletRootDir": "/"}, check_kubelet_root_slash),
    "kubelet-root-null": Case({"kubeletRootDir": None}, check_defaults),
    "image-overrides": Case(
        {
            "imagePullPolicy": "Never",
            "imagePullSecrets": [{"name": "regcred"}],
            "topology": {
                "image": {"repository": "registry.example/dracpu/topology", "tag": "0.1.1"}
            },
            "draPlugin": {"image": {"tag": "0.2.0", "pullPolicy": "Always"}},
        },
        check_images,
    ),
    "image-registry": Case(
        {
            "imageRegistry": "registry.example:5000/dracpu",
            "topology": {"image": {"repository": "mirror.example/topology"}},
        },
        check_image_registry,
    ),
    "image-registry-empty": Case({"imageRegistry": ""}, check_image_registry_empty),
    "node-allocatable-mapping": Case(
        {"driverConfig": {"publishNodeAllocatableResourceMapping": True}}, check_node_allocatable
    ),
    "memory-devices": Case({"driverConfig": {"publishMemoryDevices": True}}, check_memory_devices),
    "memory-devices-off": Case(
        {"driverConfig": {"publishMemoryDevices": False}}, check_memory_devices_off
    ),
    "deprecated-args-win": Case(
        {
            "driverConfig": {"cpuDeviceMode": "individual", "groupBy": "numanode"},
            "args": {
                "cpuDeviceMode": "grouped",
                "groupBy": "socket",
                "reservedCPUs": "0-3",
                "hostnameOverride": "node-a",
            },
        },
        check_deprecated_args_win,
    ),
    "host-network-other-port": Case(
        {"hostNetwork": True, "api": {"port": 9464}}, check_host_network
    ),
    "on-delete-updates": Case({"updateStrategy": {"type": "OnDelete"}}, check_on_delete),
    "default-probe-timings": Case({}, check_default_probe_timings),
    # A slow, loaded or emulated node: every probe's timing from values, no template edited.
    "slow-node-probes": Case(
        {
            "probes": {
                "startup": {"periodSeconds": 5, "timeoutSeconds": 30, "failureThreshold": 120},
                "liveness": {"timeoutSeconds": 30, "failureThreshold": 5},
                "readiness": {"periodSeconds": 10, "timeoutSeconds": 30},
            },
            "topology": {
                "probes": {
                    "startup": {"initialDelaySeconds": 10},
                    "liveness": {"timeoutSeconds": 45},
                }
            },
        },
        check_slow_node_probes,
    ),
    "exec-probes": Case({"probes": {"handler": "exec"}}, check_exec_probes),
    "architectures-and-user-affinity": Case(
        {
            "nodeArchitectures": ["amd64", "arm64"],
            "affinity": {
                "nodeAffinity": _required_terms(
                    [
                        {"matchExpressions": [{"key": "pool", "operator": "Exists"}]},
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": ["n1"]}
                            ]
                        },
                    ]
                ),
                "podAntiAffinity": {},
            },
        },
        check_user_affinity_keeps_architectures,
    ),
    "any-architecture": Case({"nodeArchitectures": []}, check_no_architecture_requirement),
    "probe-ports": Case(
        {"probes": {"ports": {"topology": 9101, "nriPlugin": 9104}}}, check_probe_ports
    ),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request: pytest.FixtureRequest, helm: Path) -> tuple[Case, Rendered]:
    chosen = CASES[request.param]
    return chosen, render(helm, chosen.values, set_args=chosen.set_args)


def test_lint_is_clean(case: tuple[Case, Rendered], helm: Path) -> None:
    chosen, _ = case
    result = lint(helm, chosen.values)
    assert result.returncode == 0, result.stdout + result.stderr


def test_case_specific_expectations(case: tuple[Case, Rendered]) -> None:
    chosen, rendered = case
    chosen.check(rendered)


# The oldest release the chart supports, and the newest whose schemas kubernetes-validate ships.
SCHEMA_RELEASES = (KUBE_VERSION, "1.37.0")


@pytest.mark.parametrize("release", SCHEMA_RELEASES)
def test_every_object_is_valid_kubernetes(case: tuple[Case, Rendered], release: str) -> None:
    _, rendered = case
    for obj in rendered.objects:
        # strict: unknown fields are errors too, not only wrong types. A kind without a schema
        # raises SchemaNotFoundError, so the DeviceClass is checked against resource.k8s.io/v1.
        assert kubernetes_validate.validate(obj, release, strict=True) == release.rpartition(".")[0]


def test_objects_rendered(case: tuple[Case, Rendered]) -> None:
    _, rendered = case
    kinds = sorted(obj["kind"] for obj in rendered.objects)
    expected = ["ClusterRole", "ClusterRoleBinding", "ConfigMap", "DaemonSet", "DeviceClass"]
    if not flags(rendered.container("api")["args"])["--bind-address"].startswith("127."):
        network = (
            []
            if rendered.one("DaemonSet")["spec"]["template"]["spec"].get("hostNetwork")
            else ["NetworkPolicy"]
        )
        expected += network
    # The workloads' opaque configurations are checked at admission in every rendering (the
    # driver's own policies only where the cluster is known to serve them).
    expected += ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]
    if rendered.config_file().get("publishMemoryDevices"):
        expected.append("DeviceClass")  # dra.cpu-memory
    assert kinds == sorted([*expected, "ServiceAccount"])
    device_class = device_classes(rendered)["dra.cpu"]
    assert device_class["apiVersion"] == "resource.k8s.io/v1"
    assert device_class["spec"]["selectors"] == [{"cel": {"expression": CPU_SELECTOR}}]


def test_five_containers_run_their_service(case: tuple[Case, Rendered]) -> None:
    _, rendered = case
    assert [c["name"] for c in rendered.pod["containers"]] == list(SERVICES)
    for container in rendered.pod["containers"]:
        assert container["command"] == [f"dracpu-{container['name']}"]
    assert rendered.pod["priorityClassName"] == "system-node-critical"


def test_every_path_flag_is_backed_by_a_mount(case: tuple[Case, Rendered]) -> None:
    _, rendered = case
    path_flags = {
        "--socket",
        "--topology-socket",
        "--allocator-socket",
        "--dra-plugin-socket",
        "--nri-plugin-socket",
        "--sysfs-root",
        "--state-dir",
        "--cdi-dir",
        "--kubelet-root-dir",
        "--nri-socket",
        "--config",
    }
    for name in SERVICES:
        container = rendered.container(name)
        for flag, value in flags(container["args"]).items():
            if flag not in path_flags:
                continue
            assert value.startswith("/"), f"{name} {flag} {value} is not absolute"
            if flag == "--kubelet-root-dir":
                # The root itself is not mounted; the two directories the plugin uses are, each
                # at the same path as on the host, so the paths it hands the kubelet are true.
                for sub in ("plugins/dra.cpu", "plugins_registry/dra.cpu"):
                    inside = str(Path(value) / sub)
                    assert _host_path(rendered, name, inside) == inside
                continue
            mount = mount_for(container, value)
            assert mount is not None, f"{name}: {flag} {value} is on no mount"
            if flag.endswith("socket") and flag != "--nri-socket":
                assert mount["name"] == "sockets", f"{name} {flag} is not on the socket volume"


def test_socket_paths_agree_between_containers(case: tuple[Case, Rendered]) -> None:
    _, rendered = case
    served = {name: _flags_of(rendered, name)["--socket"] for name in GRPC_SERVICES}
    assert served == {name: f"{SOCKET_DIR}/{name}.sock" for name in GRPC_SERVICES}
    clients = {
        "allocator": {"topology"},
        "dra-plugin": {"allocator", "nri-plugin"},  # its prerequisites, for the pod's Events
        "nri-plugin": {"allocator"},
        "api": set(GRPC_SERVICES),
    }
    for client, peers in clients.items():
        given = {
            flag.removeprefix("--").removesuffix("-socket"): value
            for flag, value in _flags_of(rendered, client).items()
            if flag.endswith("-socket") and flag not in ("--socket", "--nri-socket")
        }
        wanted = {peer: served[peer] for peer in peers}
        if client == "api":  # reads only: the allocator's read-only socket
            wanted["allocator"] = f"{SOCKET_DIR}/allocator-ro.sock"
        assert given == wanted, client
    assert rendered.volume("sockets") == {"name": "sockets", "emptyDir": {}}


def test_probes_check_the_containers_own_endpoint(case: tuple[Case, Rendered]) -> None:
    chosen, rendered = case
    handler = chosen.values.get("probes", {}).get("handler", "http")
    for name in GRPC_SERVICES:
        container = rendered.container(name)
        given = _flags_of(rendered, name)
        socket = given["--socket"]
        for probe in ("startupProbe", "livenessProbe"):
            if handler == "http":
                # The service's own listener, asking its own gRPC socket: no process started.
                port = int(given["--probe-address"].rpartition(":")[2])
                assert container[probe]["httpGet"] == {"path": "/livez", "port": port}
                assert "exec" not in container[probe]
            else:
                command = container[probe]["exec"]["command"]
                assert command[:2] == ["dracpu", "health"]
                assert flags(command[2:])["--socket"] == socket
                # Both accept a service waiting for a peer; readiness is the api's /readyz.
                assert "--live" in command
                assert "--probe-address" not in given
        assert "readinessProbe" not in container
    ports = [int(_flags_of(rendered, n).get("--probe-address", ":0")[1:]) for n in GRPC_SERVICES]
    api_port = int(_flags_of(rendered, "api")["--bind-address"].rpartition(":")[2])
    assert api_port not in ports and (handler != "http" or len(set(ports)) == 4)
    api = rendered.container("api")
    assert api["ports"] == [{"name": "http", "containerPort": api_port, "protocol": "TCP"}]
    assert api["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert api["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert api["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}


def test_every_container_reads_the_config_file_and_knows_its_node(
    case: tuple[Case, Rendered],
) -> None:
    _, rendered = case
    for name in SERVICES:
        container = rendered.container(name)
        assert _flags_of(rendered, name)["--config"] == CONFIG_FILE
        mount = mount_for(container, CONFIG_FILE)
        assert mount is not None and mount["readOnly"] is True
        assert (
            rendered.volume(mount["name"])["configMap"]["name"]
            == (rendered.one("ConfigMap")["metadata"]["name"])
        )
        node_name = [env for env in container["env"] if env["name"] == "NODE_NAME"]
        assert node_name == [
            {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
        ]


def test_config_file_is_accepted_by_the_services_loader(case: tuple[Case, Rendered]) -> None:
    _, rendered = case
    config = parse_document(rendered.config_file(), "rendered config.yaml")
    assert config.to_document()["apiVersion"] == "v1alpha1"


# The argv parser of each service, by the name its module gives it.
PARSERS = {
    "topology": ("dracpu.topology.flags", "build_parser"),
    "allocator": ("dracpu.allocator.flags", "build_parser"),
    "dra-plugin": ("dracpu.dra_plugin.flags", "build_parser"),
    "nri-plugin": ("dracpu.nri_plugin.flags", "build_parser"),
    "api": ("dracpu.api.flags", "build_parser"),
}


@pytest.mark.parametrize("service", SERVICES)
def test_services_accept_the_rendered_command_lines(
    service: str, case: tuple[Case, Rendered]
) -> None:
    _, rendered = case
    module_name, function = PARSERS[service]
    module = importlib.import_module(module_name)
    parser = getattr(module, function)()
    args = parser.parse_args(rendered.container(service)["args"])
    assert args.config == CONFIG_FILE
    assert args.verbosity == int(_flags_of(rendered, service)["-v"])
    if service in GRPC_SERVICES:
        assert args.socket == f"{SOCKET_DIR}/{service}.sock"


def test_the_default_architectures_are_the_ones_the_images_are_built_for() -> None:
    script = (CHART.parents[1] / "tools" / "build-images.sh").read_text()
    built = {
        ARCH_OF_WHEEL_PLATFORM[match]
        for match in re.findall(r"manylinux[0-9_]*?_(x86_64|aarch64)\b", script)
    }
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    assert built, "tools/build-images.sh names no wheel platform"
    assert sorted(defaults["nodeArchitectures"]) == sorted(built)
