"""A reference driver user's values file and scripts, unchanged, against our chart on the
one-node cluster: the reference chart's values install (images pointed at ours, as its README
does for a locally built image), and its troubleshooting page's fleet-collection loop, run as
written, gets one YAML report per node with the configuration the driver runs with.

Runs before test_e2e_scenarios.py (file order) and puts the session's install back after.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from harness.cluster import NAMESPACE, RELEASE, ROOT, Cluster, say, step
from harness.waits import wait_for

pytestmark = pytest.mark.e2e

# The reference chart's values.yaml, every key at its default (as in
# tests/packaging/test_chart_reference_values.py).
REFERENCE_VALUES = {
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
    "driverConfig": {"groupBy": "socket"},
}

# docs/user/troubleshooting.md of the reference, "Collecting From a Cluster", as written.
FLEET_LOOP = """
namespace=kube-system  # the namespace the driver was installed into
selector='app.kubernetes.io/name=dra-driver-cpu'
outdir=./dracpu-gatherinfo

mkdir -p "${outdir}"

for pod in $(kubectl get pods -n "${namespace}" -l "${selector}" -o name); do
  node=$(kubectl get -n "${namespace}" "${pod}" -o jsonpath='{.spec.nodeName}')
  kubectl exec -n "${namespace}" "${pod}" -- /dracpu gatherinfo --stdout > "${outdir}/${node}.yaml"
done
"""
# The legacy spelling, kept by the reference in 0.2.z and 0.3.z.
LEGACY_LOOP = FLEET_LOOP.replace("/dracpu gatherinfo --stdout", "/dracpu-gatherinfo --stdout")


@pytest.fixture(scope="module")
def reference_install(
    driver: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    values = tmp_path_factory.mktemp("reference") / "values.yaml"
    values.write_text(yaml.safe_dump(REFERENCE_VALUES))
    with step("helm upgrade with the reference chart's values"):
        # The cluster's own settings (kubelet root, NRI socket, ...) as --set, and the
        # image pointed at ours: an empty repository is each service's local image.
        driver.helm(
            "upgrade",
            "--install",
            RELEASE,
            str(ROOT / "helm/dra-driver-cpu"),
            "-n",
            NAMESPACE,
            "-f",
            str(values),
            "--set",
            "image.repository=",
            "--set",
            "image.pullPolicy=Never",
            *driver.chart_values(),
            "--wait",
            "--timeout",
            "180s",
        )
        wait_for(
            _reference_pod_ready(driver), "reference-valued pod Ready", timeout=180, interval=0.3
        )
        # The loop execs into every pod the selector lists: the replaced pod must be gone.
        wait_for(
            lambda: len(_driver_pods(driver)) == 1 or None, "one pod", timeout=120, interval=0.3
        )
    yield driver
    with step("the session's install back"):
        driver.install()
        wait_for(driver.driver_ready, "driver pod Ready again", timeout=180, interval=0.3)
        wait_for(lambda: driver.published(), "ResourceSlice published", timeout=60, interval=0.3)


def _driver_pods(node: Cluster) -> list[dict[str, Any]]:
    pods: list[dict[str, Any]] = node.get("pods", namespace=NAMESPACE)["items"]
    return [
        p for p in pods if p["metadata"].get("labels", {}).get("app.kubernetes.io/name") == RELEASE
    ]


def _reference_pod_ready(node: Cluster) -> Callable[[], dict[str, Any] | None]:
    def ready() -> dict[str, Any] | None:
        pod = node.driver_ready()
        if pod is None:
            return None
        args = pod["spec"]["containers"][0]["args"]
        return pod if "-v" in args and args[args.index("-v") + 1] == "4" else None

    return ready


def _run_as_written(node: Cluster, script: str, cwd: Path) -> None:
    tools = cwd / "bin"
    tools.mkdir(exist_ok=True)
    kubectl = tools / "kubectl"
    if not kubectl.exists():
        kubectl.symlink_to(node.kubectl_bin)
    env = {**os.environ, "KUBECONFIG": node.kubeconfig, "PATH": f"{tools}:{os.environ['PATH']}"}
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("script", [FLEET_LOOP, LEGACY_LOOP], ids=["dracpu", "legacy"])
def test_the_reference_fleet_collection_loop(
    reference_install: Cluster, script: str, tmp_path: Path
) -> None:
    node = reference_install
    pod = node.driver_pod()
    assert pod is not None
    annotations = pod["metadata"]["annotations"]
    assert annotations["kubectl.kubernetes.io/default-container"] == "topology"
    with step("the fleet-collection loop, as written"):
        _run_as_written(node, script, tmp_path)
    reports = sorted((tmp_path / "dracpu-gatherinfo").glob("*.yaml"))
    assert [r.name for r in reports] == [f"{node.node}.yaml"]
    report = yaml.safe_load(reports[0].read_text())
    say(f"report: layoutVersion={report['layoutVersion']} driverConfig={report['driverConfig']}")
    assert report["layoutVersion"] == "v1"
    # The configuration the driver runs with: its ConfigMap and its flags.
    config_map = node.get("configmap", f"{RELEASE}-config", namespace=NAMESPACE)
    file_config = yaml.safe_load(config_map["data"]["config.yaml"])
    assert file_config["groupBy"] == "socket"
    for key, value in file_config.items():
        assert report["driverConfig"][key] == value, key
    assert report["driverConfig"]["sysfsRoot"] == "/host/sys"  # the topology flag
    assert "--config=/etc/dracpu/config.yaml" in report["driverCommandLine"]
    assert report["cpuDetails"]["topology"]["numCPUs"] == len(report["cpuDetails"]["cpus"])


def test_the_reference_scripts_read_config_from_the_daemonset(reference_install: Cluster) -> None:
    # What scripts written for the reference read: `--config=<path>` in the first container's
    # args, and the ConfigMap `<daemonset>-config`'s config.yaml.
    node = reference_install
    daemonset = node.get("daemonset", RELEASE, namespace=NAMESPACE)
    containers = daemonset["spec"]["template"]["spec"]["containers"]
    first = containers[0]["args"]
    config_arg = next(a for a in first if a.startswith("--config="))
    assert config_arg == "--config=/etc/dracpu/config.yaml"
    config_map = node.get("configmap", f"{daemonset['metadata']['name']}-config", NAMESPACE)
    learned = yaml.safe_load(config_map["data"][Path(config_arg.partition("=")[2]).name])
    assert learned["groupBy"] == "socket"
    for container in containers:
        assert container["resources"] == {"requests": {"cpu": "100m", "memory": "50Mi"}}
    say(f"daemonset args of {containers[0]['name']}: {json.dumps(first)}")
