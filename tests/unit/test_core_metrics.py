"""Every service's registry: prometheus_client collectors for the dra_cpu_* metrics it owns,
declared as dracpu.core.metrics defines them, plus the standard collectors of a Python
process; the exposition parses with prometheus_client's own parser."""

from __future__ import annotations

import math
from typing import Any

import prometheus_client
import pytest
from prometheus_client.parser import text_string_to_metric_families

from dracpu.core import metrics
from dracpu.core.metrics import build, exposition, service_registry

OWNERS = ("topology", "allocator", "dra-plugin", "nri-plugin")
# Label values that need escaping, and values that need Go's number spelling.
LABEL_VALUES = ("plain", 'quo"te', "back\\slash", "new\nline")
GAUGE_VALUES = (0, 1e-7, 12345678.5, -3, math.inf)
OBSERVATIONS = (0.0001, 0.003, 3, 45, 100, 1024)
# The families of prometheus_client's process, platform and GC collectors.
STANDARD = {
    "process_virtual_memory_bytes",
    "process_resident_memory_bytes",
    "process_start_time_seconds",
    "process_cpu_seconds",
    "process_open_fds",
    "process_max_fds",
    "python_info",
    "python_gc_objects_collected",
    "python_gc_objects_uncollectable",
    "python_gc_collections",
}


def record(collectors: dict[str, Any]) -> None:
    for spec in metrics.SPECS:
        collector = collectors.get(spec.name)
        if collector is None:
            continue
        targets = (
            [collector.labels(*(value for _ in spec.labels)) for value in LABEL_VALUES]
            if spec.labels
            else [collector]
        )
        for target in targets:
            if spec.type == "gauge":
                for value in GAUGE_VALUES:
                    target.set(value)
            elif spec.type == "counter":
                target.inc(3)
            else:
                for value in OBSERVATIONS:
                    target.observe(value)


@pytest.mark.parametrize("owner", OWNERS)
def test_exposition_parses_with_the_declared_families(owner: str) -> None:
    registry = service_registry()
    collectors = build(owner, registry)
    for recorded in (False, True):
        if recorded:
            record(dict(collectors))
        text = exposition(registry)
        families = {f.name: f for f in text_string_to_metric_families(text)}
        owned = {s.name.removesuffix("_total"): s for s in metrics.SPECS if s.owner == owner}
        assert set(families) == set(owned) | STANDARD
        for name, spec in owned.items():
            family = families[name]
            assert family.type == spec.type, name
            assert family.documentation == spec.help, name
            for sample in family.samples:
                assert set(sample.labels) - {"le"} == set(spec.labels), sample
        # No *_created series: the families keep the samples they always had.
        assert "_created" not in text


@pytest.mark.parametrize("owner", OWNERS)
def test_exposition_holds_this_processs_memory(owner: str) -> None:
    registry = service_registry()
    build(owner, registry)
    families = {f.name: f for f in text_string_to_metric_families(exposition(registry))}
    (rss,) = families["process_resident_memory_bytes"].samples
    assert rss.value > 1_000_000
    (fds,) = families["process_open_fds"].samples
    assert fds.value > 0
    (info,) = families["python_info"].samples
    assert info.labels["implementation"] == "CPython"


def test_result_counters_start_with_every_result_at_zero() -> None:
    registry = service_registry()
    build("dra-plugin", registry)
    text = exposition(registry)
    for result in metrics.RESULTS:
        assert f'dra_cpu_prepare_claims_total{{result="{result}"}} 0.0' in text


def test_histogram_buckets_are_cumulative() -> None:
    registry = prometheus_client.CollectorRegistry()
    histogram = prometheus_client.Histogram("h", "help", registry=registry, buckets=(1, 2))
    for value in (0.5, 1.5, 1.5, 9):
        histogram.observe(value)
    service_registry()  # no *_created sample from here on
    assert exposition(registry) == (
        "# HELP h help\n# TYPE h histogram\n"
        'h_bucket{le="1.0"} 1.0\nh_bucket{le="2.0"} 3.0\nh_bucket{le="+Inf"} 4.0\n'
        "h_count 4.0\nh_sum 12.5\n"
    )


def test_claim_sizes_land_in_their_buckets() -> None:
    registry = service_registry()
    sizes = build("allocator", registry)["dra_cpu_claim_allocated_cpus"]
    assert isinstance(sizes, prometheus_client.Histogram)
    for cpus in (1, 3, 4, 2000):
        sizes.observe(cpus)
    text = exposition(registry)
    assert 'dra_cpu_claim_allocated_cpus_bucket{le="1.0"} 1.0' in text
    assert 'dra_cpu_claim_allocated_cpus_bucket{le="4.0"} 3.0' in text
    assert 'dra_cpu_claim_allocated_cpus_bucket{le="1024.0"} 3.0' in text
    assert 'dra_cpu_claim_allocated_cpus_bucket{le="+Inf"} 4.0' in text


@pytest.mark.parametrize(
    ("call", "message"),
    [
        pytest.param(lambda c, g: c.inc(-1), "non-negative", id="counter-decrease"),
        pytest.param(lambda c, g: g.labels("a", "b"), "label", id="too-many-labels"),
        pytest.param(lambda c, g: g.labels(other="a"), "label", id="unknown-label"),
        pytest.param(lambda c, g: c.labels("a"), "label", id="labels-on-unlabelled"),
    ],
)
def test_misuse_is_refused(call: Any, message: str) -> None:
    registry = prometheus_client.CollectorRegistry()
    counter = prometheus_client.Counter("c", "help", registry=registry)
    gauge = prometheus_client.Gauge("g", "help", ("k",), registry=registry)
    with pytest.raises(ValueError, match=message):
        call(counter, gauge)


def test_a_name_registers_once() -> None:
    registry = service_registry()
    build("allocator", registry)
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        build("allocator", registry)


def test_clear_forgets_label_combinations() -> None:
    registry = service_registry()
    unhealthy = build("allocator", registry)["dra_cpu_device_unhealthy"]
    assert isinstance(unhealthy, prometheus_client.Gauge)
    unhealthy.labels(device="a", health="Unhealthy").set(1)
    unhealthy.clear()
    unhealthy.labels(device="b", health="Unknown").set(1)
    text = exposition(registry)
    assert 'dra_cpu_device_unhealthy{device="b",health="Unknown"} 1.0' in text
    assert 'device="a"' not in text


def test_definitions_need_no_prometheus_client() -> None:
    # `dracpu introspect metrics` describes every metric without building any collector.
    described = metrics.describe()
    assert [d["name"] for d in described] == [s.name for s in metrics.SPECS]
    assert {d["type"] for d in described} == {"counter", "gauge", "histogram"}
