"""The driver as `helm install` with the chart's defaults runs it: on the pod network of the
one-node cluster (a CNI bridge, tools/cluster.sh), its api on its pod IP, the kubelet's probes
on that IP, a pod of the release's namespace scraping `/metrics` and reading `/v1/health` by
pod IP as Prometheus would, and the api's NetworkPolicy selecting the pod. The bridge enforces
no NetworkPolicy, so a refused peer is not tested here: the policy object is."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from typing import Any

import pytest
from harness.cluster import NAMESPACE, RELEASE, Cluster, step
from harness.scraper import assert_scraped, scraper_manifest
from harness.waits import wait_for

pytestmark = pytest.mark.e2e

SCRAPER = "metrics-scraper"


@pytest.fixture
def scraped(driver: Cluster) -> Iterator[tuple[dict[str, Any], dict[str, Any], str]]:
    """The driver pod, the scraper pod once it ended, and what it printed."""
    pod = wait_for(driver.driver_ready, "driver pod Ready", timeout=120, interval=0.3)
    try:
        with step("a pod of the release's namespace scrapes the driver by pod IP"):
            driver.apply(
                scraper_manifest(SCRAPER, pod["status"]["podIP"], driver.api_port), NAMESPACE
            )

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
    assert_scraped(output)


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
