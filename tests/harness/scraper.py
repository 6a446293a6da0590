"""A pod fetching the driver's `/metrics` and `/v1/health` by its pod IP, as Prometheus would
from the release's namespace, and the reading of what it printed."""

from __future__ import annotations

import json

from harness.cluster import NAMESPACE, TEST_IMAGE

HEALTH_MARK = "--- /v1/health ---"


def scraper_manifest(
    name: str,
    address: str,
    port: int,
    *,
    node: str = "",
    namespace: str = NAMESPACE,
    wait: int = 60,
) -> str:
    """A pod of `namespace` (the release's), on the pod network (of `node` when named),
    fetching `/metrics` then `/v1/health` from `address:port` with busybox's nc, which gives up
    after `wait` seconds without an answer (the image's static wget crashes with a
    segmentation fault)."""

    def get(path: str) -> str:
        request = f"GET {path} HTTP/1.0\\r\\nHost: {address}\\r\\n\\r\\n"
        # stdin kept open: with it closed at once the api answered nothing.
        return f"(printf '{request}'; sleep 5) | nc -w {wait} {address} {port}"

    script = f"{get('/metrics')} && echo '{HEALTH_MARK}' && {get('/v1/health')}"
    spec = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 1,
        "tolerations": [{"operator": "Exists"}],
        "containers": [{"name": "scrape", "image": TEST_IMAGE, "imagePullPolicy": "Never",
                        "command": ["sh", "-c", script]}],
    }  # fmt: skip
    if node:
        spec["nodeName"] = node
    return json.dumps({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    })  # fmt: skip


def body(response: str) -> str:
    """An HTTP response's body, once its status says 200."""
    head, _, rest = response.replace("\r\n", "\n").partition("\n\n")
    assert head.split("\n", 1)[0].split()[1:2] == ["200"], head
    return rest


def assert_scraped(output: str, where: str = "") -> None:
    """The scraper's output holds the driver's metrics and a health report naming the four
    gRPC services."""
    metrics, _, health = output.partition(HEALTH_MARK)
    text = body(metrics.strip())
    # Without a service's families, the api's own gauge says which services it could not ask.
    up = [line for line in text.splitlines() if line.startswith("dracpu_api_backend_up")]
    assert "# TYPE dra_cpu_" in text, f"{where}: no service's metrics in {len(text)} bytes: {up}"
    services = {s["service"] for s in json.loads(body(health.strip()))["services"]}
    assert {"topology", "allocator", "dra-plugin", "nri-plugin"} <= services
