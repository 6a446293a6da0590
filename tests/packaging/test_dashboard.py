"""The chart's Grafana dashboard asks only for series the driver exports and metrics.md
documents: every metric name of every PromQL query is a sample name of a collector the
services build (counters as `_total`, histograms as `_bucket`, `_sum`, `_count`) and of a row
of metrics.md, and every `dra_cpu_*` metric the driver defines is on a panel."""

from __future__ import annotations

import json
import os
import re
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helm_chart import CHART, ROOT

from dracpu.api.metrics import ApiMetrics
from dracpu.core import metrics

DASHBOARD = CHART / "dashboards" / "dra-driver-cpu.json"
METRICS_DOC = ROOT / "docs" / "user" / "metrics.md"
HELM_HOMES = ("HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME")
OWNERS = sorted({spec.owner for spec in metrics.SPECS})

# What is not a metric name in a query: label matchers and strings, range selectors, grouping
# label lists, Grafana variables. Function and aggregation names are followed by `(`.
_STRIPPED = (
    re.compile(r'"(?:[^"\\]|\\.)*"'),
    re.compile(r"\{[^{}]*\}"),
    re.compile(r"\[[^\[\]]*\]"),
    re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)"),
    re.compile(r"\$\{?\w+\}?"),
)
_KEYWORDS = frozenset({"and", "or", "unless", "bool", "offset", "by", "without", "inf", "nan"})
_NAME = re.compile(r"(?<![\w:.])([A-Za-z_:][A-Za-z0-9_:]*)\b(?!\s*\()")
_LABEL_VALUES = re.compile(r"^label_values\(\s*([A-Za-z_:][A-Za-z0-9_:]*)\s*,\s*\w+\s*\)$")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects."""
    for pattern in _STRIPPED:
        expr = pattern.sub(" ", expr)
    expr = re.sub(r"(?<![\w.])\d+(?:\.\d+)?(?:e[+-]?\d+)?", " ", expr)
    return {name for name in _NAME.findall(expr) if name.lower() not in _KEYWORDS}


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def queries() -> list[tuple[str, str]]:
    """(where, PromQL) of every panel target and every query variable."""
    found = []
    for panel in _panels(dashboard()["panels"]):
        for target in panel.get("targets", []):
            found.append((f"{panel['title']} {target['refId']}", target["expr"]))
    for variable in dashboard()["templating"]["list"]:
        if variable["type"] != "query":
            continue
        query = variable["query"]
        text = query["query"] if isinstance(query, dict) else query
        match = _LABEL_VALUES.match(text)
        assert match, f"variable {variable['name']}: not a label_values() query: {text}"
        found.append((f"${variable['name']}", match.group(1)))
    return found


def _sample_names(name: str, kind: str) -> set[str]:
    if kind == "counter":
        return {name if name.endswith("_total") else f"{name}_total"}
    if kind == "histogram":
        return {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
    return {name}


def exported() -> set[str]:
    """Sample names of every collector the five services register, built as they build them:
    each owner's dra_cpu_* collectors, the api's own, and every process's standard ones."""
    registries = []
    for owner in OWNERS:
        registry = metrics.service_registry()
        metrics.build(owner, registry)
        registries.append(registry)
    registries.append(ApiMetrics().registry)
    names: set[str] = set()
    for registry in registries:
        for family in registry.collect():
            names |= _sample_names(family.name, family.type)
            names |= {sample.name for sample in family.samples}
    return names


def documented() -> set[str]:
    """Sample names of every metric row of metrics.md: `name` (or `a`, `b`) | type | ..."""
    names: set[str] = set()
    for line in METRICS_DOC.read_text().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) < 2 or not cells[0].startswith("`"):
            continue
        for name in re.findall(r"`([a-z_:][a-z0-9_:]*)`", cells[0]):
            names |= _sample_names(name, cells[1])
    return names


QUERIES = queries()
EXPORTED = exported()
DOCUMENTED = documented()


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ('sum by (node) (dra_cpu_allocated_cpus{node=~"$node"})', {"dra_cpu_allocated_cpus"}),
        (
            'histogram_quantile(0.99, sum by (le, route) (rate(x_bucket{a="1"}[$__range])))',
            {"x_bucket"},
        ),
        ("sum(rate(a_sum[5m])) / sum(rate(b_count[5m])) > 0.5", {"a_sum", "b_count"}),
        ("count by (node) (up == 1) unless on (node) c", {"up", "c"}),
    ],
)
def test_metric_names_are_read_from_promql(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names


def test_the_readers_find_metrics() -> None:
    assert {"dra_cpu_prepare_claims_total", "process_cpu_seconds_total"} <= EXPORTED
    assert "dra_cpu_prepare_claim_duration_seconds_bucket" in EXPORTED
    assert "dracpu_api_http_requests_total" in DOCUMENTED
    assert "dra_cpu_claim_allocated_cpus_count" in DOCUMENTED
    assert len(QUERIES) >= 20


@pytest.mark.parametrize(("where", "expr"), QUERIES, ids=[where for where, _ in QUERIES])
def test_every_queried_metric_is_exported_and_documented(where: str, expr: str) -> None:
    names = metric_names(expr)
    assert names, f"{where}: no metric in {expr}"
    assert names - EXPORTED == set(), f"{where}: not exported by any service"
    assert names - DOCUMENTED == set(), f"{where}: not in docs/user/metrics.md"


def test_every_driver_metric_is_on_the_dashboard() -> None:
    queried = set().union(*(metric_names(expr) for _, expr in QUERIES))
    missing = [
        spec.name for spec in metrics.SPECS if not _sample_names(spec.name, spec.type) & queried
    ]
    assert missing == []


def test_every_panel_reads_the_chosen_data_source() -> None:
    variables = {v["name"]: v for v in dashboard()["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    ids = []
    for panel in _panels(dashboard()["panels"]):
        ids.append(panel["id"])
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        for target in panel["targets"]:
            assert target["datasource"] == panel["datasource"]
    assert len(ids) == len(set(ids)), "panel ids repeat"


def test_the_chart_package_carries_the_dashboard(helm: Path, tmp_path: Path) -> None:
    env = {**os.environ, **{n: str(tmp_path / n.lower()) for n in HELM_HOMES}}
    subprocess.run(
        [str(helm), "package", str(CHART), "--destination", str(tmp_path)],
        check=True,
        capture_output=True,
        timeout=120,
        env=env,
    )
    (package,) = tmp_path.glob("dra-driver-cpu-*.tgz")
    with tarfile.open(package) as archive:
        member = archive.extractfile("dra-driver-cpu/dashboards/dra-driver-cpu.json")
        assert member is not None
        assert json.loads(member.read()) == dashboard()
