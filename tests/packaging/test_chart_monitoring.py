"""The chart's Prometheus Operator monitors and Grafana dashboard: off by default, rendered only
where the cluster serves the monitor's kind, scraping the port the api actually listens on, and
the dashboard ConfigMap carrying the chart's dashboard file as it is."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from helm_chart import CHART, KUBE_VERSION, Rendered, RenderError, flags, notes, render

SERVICE_MONITOR = "monitoring.coreos.com/v1/ServiceMonitor"
POD_MONITOR = "monitoring.coreos.com/v1/PodMonitor"
MONITORS = (SERVICE_MONITOR, POD_MONITOR)
DASHBOARD = CHART / "dashboards" / "dra-driver-cpu.json"
NODE_LABEL = {
    "sourceLabels": ["__meta_kubernetes_pod_node_name"],
    "targetLabel": "node",
    "action": "replace",
}


def _api_port(rendered: Rendered) -> int:
    return int(flags(rendered.container("api")["args"])["--bind-address"].rpartition(":")[2])


def _monitoring(**parts: dict[str, Any]) -> dict[str, Any]:
    return {"monitoring": parts}


def test_nothing_is_rendered_by_default_even_where_the_kinds_are_served(helm: Path) -> None:
    rendered = render(helm, api_versions=MONITORS)
    kinds = {obj["kind"] for obj in rendered.objects}
    assert not kinds & {"ServiceMonitor", "PodMonitor", "Service"}
    assert [cm["metadata"]["name"] for cm in rendered.of_kind("ConfigMap")] == [
        "dracpu-dra-driver-cpu-config"
    ]


@pytest.mark.parametrize("key", ["serviceMonitor", "podMonitor"])
def test_an_enabled_monitor_is_skipped_where_its_kind_is_not_served(helm: Path, key: str) -> None:
    values = _monitoring(**{key: {"enabled": True}})
    rendered = render(helm, values)
    assert not rendered.of_kind("ServiceMonitor") and not rendered.of_kind("PodMonitor")
    kind = key[0].upper() + key[1:]
    assert f"No {kind} was created: monitoring.{key}.enabled is set" in notes(helm, values)


@pytest.mark.parametrize("port", [None, 9464])
def test_the_service_monitor_scrapes_the_api_port_through_a_headless_service(
    helm: Path, port: int | None
) -> None:
    values = {
        **_monitoring(serviceMonitor={"enabled": True, "labels": {"release": "prometheus"}}),
        "api": {"port": port},
    }
    rendered = render(helm, values, api_versions=(SERVICE_MONITOR,))
    monitor = rendered.one("ServiceMonitor")
    service = rendered.one("Service")
    assert kubernetes_validate.validate(service, KUBE_VERSION, strict=True)
    assert service["spec"]["clusterIP"] == "None"
    # The Service selects the DaemonSet's pods and forwards to the api's named container port.
    pod_labels = rendered.one("DaemonSet")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert service["spec"]["ports"] == [
        {"name": "http", "port": _api_port(rendered), "targetPort": "http", "protocol": "TCP"}
    ]
    assert _api_port(rendered) == (port or 8080)
    # The monitor selects that Service, in the release's namespace, by its port's name.
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["kube-system"]}
    assert monitor["spec"]["endpoints"] == [
        {"port": "http", "path": "/metrics", "interval": "30s", "relabelings": [NODE_LABEL]}
    ]
    assert not rendered.of_kind("PodMonitor")


def test_the_pod_monitor_scrapes_the_api_container_port(helm: Path) -> None:
    values = _monitoring(podMonitor={"enabled": True, "interval": "1m", "scrapeTimeout": "20s"})
    rendered = render(helm, values, api_versions=(POD_MONITOR,))
    monitor = rendered.one("PodMonitor")
    pod_labels = rendered.one("DaemonSet")["spec"]["template"]["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    named = {p["name"]: p["containerPort"] for p in rendered.container("api")["ports"]}
    assert named == {"http": _api_port(rendered)}
    assert monitor["spec"]["podMetricsEndpoints"] == [
        {
            "port": "http",
            "path": "/metrics",
            "interval": "1m",
            "scrapeTimeout": "20s",
            "relabelings": [NODE_LABEL],
        }
    ]
    assert not rendered.of_kind("ServiceMonitor") and not rendered.of_kind("Service")


def test_the_network_policy_admits_prometheus_only_when_told(helm: Path) -> None:
    values = _monitoring(podMonitor={"enabled": True})
    text = notes(helm, values)
    assert "needs it in api.networkPolicy.from" in text
    admitted = {
        **values,
        "api": {"networkPolicy": {"from": [{"namespaceSelector": {"matchLabels": {"a": "b"}}}]}},
    }
    assert "needs it in api.networkPolicy.from" not in notes(helm, admitted)


@pytest.mark.parametrize("namespace", ["", "monitoring"])
def test_the_dashboard_configmap_carries_the_charts_dashboard(helm: Path, namespace: str) -> None:
    values = _monitoring(dashboard={"enabled": True, "namespace": namespace})
    rendered = render(helm, values)
    dashboards = [
        cm for cm in rendered.of_kind("ConfigMap") if cm["metadata"]["name"].endswith("-dashboard")
    ]
    assert len(dashboards) == 1
    configmap = dashboards[0]
    assert kubernetes_validate.validate(configmap, KUBE_VERSION, strict=True)
    assert configmap["metadata"]["namespace"] == (namespace or "kube-system")
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped = json.loads(configmap["data"]["dra-driver-cpu.json"])
    assert shipped == json.loads(DASHBOARD.read_text())


@pytest.mark.parametrize(
    ("values", "fragment"),
    [
        (_monitoring(serviceMonitor={"interval": "soon"}), "/monitoring/serviceMonitor/interval"),
        (_monitoring(podMonitor={"enable": True}), "/monitoring/podMonitor"),
        (_monitoring(dashboard={"namespace": "Not_A_Namespace"}), "/monitoring/dashboard"),
        ({"nodeArchitectures": "amd64"}, "/nodeArchitectures"),
        ({"nodeArchitectures": ["amd64", "amd64"]}, "/nodeArchitectures"),
    ],
    ids=["bad-interval", "misspelt-key", "bad-namespace", "not-a-list", "repeated-arch"],
)
def test_bad_values_are_refused_by_the_schema(
    helm: Path, values: dict[str, Any], fragment: str
) -> None:
    with pytest.raises(RenderError) as refused:
        render(helm, values)
    assert fragment in str(refused.value)
