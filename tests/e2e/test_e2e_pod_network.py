"""The driver as `helm install` with the chart's defaults runs it: on the pod network of the
one-node cluster (a CNI bridge, tools/cluster.sh), its api on its pod IP, the kubelet's probes
on that IP, a pod of the release's namespace scraping `/metrics` and reading `/v1/health` by
pod IP as Prometheus would, and the api's NetworkPolicy selecting the pod. The bridge enforces
no NetworkPolicy, so a refused peer is not tested here: the policy object is."""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterator
from typing import Any

import pytest
from harness.cluster import NAMESPACE, RELEASE, TEST_IMAGE, Cluster, step
from harness.waits import wait_for

pytestmark = pytest.mark.e2e

SCRAPER = "metrics-scraper"
HEALTH_MARK = "--- /v1/health ---"


def scraper_manifest(address: str, port: int) -> str:
    """A pod of the release's namespace, on the pod network, fetching what Prometheus would
    (busybox's nc: the image's static wget crashes with a segmentation fault)."""

    def get(path: str) -> str:
        request = f"GET {path} HTTP/1.0\\r\\nHost: {address}\\r\\n\\r\\n"
        # stdin kept open: with it closed at once the api answered nothing.
        return f"(printf '{request}'; sleep 5) | nc -w 20 {address} {port}"

    script = f"{get('/metrics')} && echo '{HEALTH_MARK}' && {get('/v1/health')}"
    return json.dumps({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": SCRAPER, "namespace": NAMESPACE},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "scrape", "image": TEST_IMAGE, "imagePullPolicy": "Never",
                            "command": ["sh", "-c", script]}],
        },
    })  # fmt: skip


def body(response: str) -> str:
    """An HTTP response's body, once its status says 200."""
    head, _, rest = response.replace("\r\n", "\n").partition("\n\n")
    assert head.split("\n", 1)[0].split()[1:2] == ["200"], head
    return rest


@pytest.fixture
def scraped(driver: Cluster) -> Iterator[tuple[dict[str, Any], dict[str, Any], str]]:
    """The driver pod, the scraper pod once it ended, and what it printed."""
    pod = wait_for(driver.driver_ready, "driver pod Ready", timeout=120, interval=0.3)
    try:
        with step("a pod of the release's namespace scrapes the driver by pod IP"):
            driver.apply(scraper_manifest(pod["status"]["podIP"], driver.api_port), NAMESPACE)

            def ended() -> dict[str, Any] | None:
                found = driver.get("pod", SCRAPER, NAMESPACE)
                phase = found.get("status", {}).get("phase")
                return found if phase in ("Succeeded", "Failed") else None

            scraper = wait_for(ended, "the scraper pod ended", timeout=120, interval=0.5)
        output = driver.kubectl("logs", "-n", NAMESPACE, SCRAPER)
        yield pod, scraper, output
    finally:
        driver.delete("pod", SCRAPER, namespace=NAMESPACE)


def test_the_driver_runs_on_the_pod_network_and_is_scraped_by_pod_ip(
    driver: Cluster, scraped: tuple[dict[str, Any], dict[str, Any], str]
) -> None:
    pod, scraper, output = scraped
    pods = ipaddress.ip_network(driver.env["POD_CIDR"])
    assert not pod["spec"].get("hostNetwork")
    assert ipaddress.ip_address(pod["status"]["podIP"]) in pods
    assert pod["status"]["podIP"] != pod["status"]["hostIP"]
    # Probes name no host: the kubelet sends them to the pod IP, and the pod is Ready.
    for container in pod["spec"]["containers"]:
        for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
            probe = container.get(kind)
            if probe and "httpGet" in probe:
                assert "host" not in probe["httpGet"], (container["name"], kind)
    api = next(c for c in pod["spec"]["containers"] if c["name"] == "api")
    assert api["readinessProbe"]["httpGet"]["port"] in (driver.api_port, "http")

    assert not scraper["spec"].get("hostNetwork")
    assert ipaddress.ip_address(scraper["status"]["podIP"]) in pods
    assert scraper["status"]["phase"] == "Succeeded", output
    metrics, _, health = output.partition(HEALTH_MARK)
    assert "# TYPE dra_cpu_" in body(metrics.strip())
    services = {s["service"] for s in json.loads(body(health.strip()))["services"]}
    assert {"topology", "allocator", "dra-plugin", "nri-plugin"} <= services


def test_the_api_network_policy_selects_the_driver_pod(driver: Cluster) -> None:
    pod = wait_for(driver.driver_ready, "driver pod Ready", timeout=120, interval=0.3)
    policy = driver.get("networkpolicy", f"{RELEASE}-api", NAMESPACE)
    selector = policy["spec"]["podSelector"]["matchLabels"]
    labels = pod["metadata"]["labels"]
    assert all(labels.get(k) == v for k, v in selector.items())
    (rule,) = policy["spec"]["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": driver.api_port}]
    assert rule["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NAMESPACE}}}
    ]
