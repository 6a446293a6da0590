"""The driver's collectors write the exposition prometheus_client writes for the same metrics,
so scrapers and the api's merge see no difference."""

from __future__ import annotations

import math
from typing import Any

import prometheus_client
import pytest
from prometheus_client.parser import text_string_to_metric_families

from dracpu.core import metrics
from dracpu.core.metrics import Counter, Gauge, Histogram, Registry, build, exposition

OWNERS = ("topology", "allocator", "dra-plugin", "nri-plugin")
# Label values that need escaping, and values that need Go's number spelling.
LABEL_VALUES = ("plain", 'quo"te', "back\\slash", "new\nline")
GAUGE_VALUES = (0, 1e-7, 12345678.5, -3, math.inf)
OBSERVATIONS = (0.0001, 0.003, 3, 45, 100, 1024)


def reference(owner: str) -> tuple[Any, dict[str, Any]]:
    """The same collectors built with prometheus_client."""
    prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]
    registry = prometheus_client.CollectorRegistry()
    collectors: dict[str, Any] = {}
    for spec in metrics.SPECS:
        if spec.owner != owner:
            continue
        if spec.type == "counter":
            counter = prometheus_client.Counter(
                spec.name, spec.help, spec.labels, registry=registry
            )
            if "result" in spec.labels:
                for result in metrics.RESULTS:
                    counter.labels(result=result)
            collectors[spec.name] = counter
        elif spec.type == "gauge":
            collectors[spec.name] = prometheus_client.Gauge(
                spec.name, spec.help, spec.labels, registry=registry
            )
        else:
            collectors[spec.name] = prometheus_client.Histogram(
                spec.name, spec.help, spec.labels, buckets=spec.buckets, registry=registry
            )
    return registry, collectors


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
def test_exposition_matches_prometheus_client(owner: str) -> None:
    theirs, their_collectors = reference(owner)
    ours = Registry()
    our_collectors = build(owner, ours)
    assert exposition(ours) == prometheus_client.generate_latest(theirs).decode()
    record(their_collectors)
    record(dict(our_collectors))
    text = exposition(ours)
    assert text == prometheus_client.generate_latest(theirs).decode()
    # And it parses back to the declared families.
    families = {f.name for f in text_string_to_metric_families(text)}
    assert families == {s.name.removesuffix("_total") for s in metrics.SPECS if s.owner == owner}


def test_histogram_buckets_are_cumulative() -> None:
    registry = Registry()
    histogram = Histogram("h", "help", registry=registry, buckets=(1, 2))
    for value in (0.5, 1.5, 1.5, 9):
        histogram.observe(value)
    assert exposition(registry) == (
        "# HELP h help\n# TYPE h histogram\n"
        'h_bucket{le="1.0"} 1.0\nh_bucket{le="2.0"} 3.0\nh_bucket{le="+Inf"} 4.0\n'
        "h_count 4.0\nh_sum 12.5\n"
    )


@pytest.mark.parametrize(
    ("call", "message"),
    [
        pytest.param(lambda c, g: c.inc(-1), "only go up", id="counter-decrease"),
        pytest.param(lambda c, g: g.labels("a", "b"), "labels are", id="too-many-labels"),
        pytest.param(lambda c, g: g.labels(other="a"), "labels are", id="unknown-label"),
        pytest.param(lambda c, g: c.labels("a"), "labels are", id="labels-on-unlabelled"),
    ],
)
def test_misuse_is_refused(call: Any, message: str) -> None:
    counter, gauge = Counter("c", "help"), Gauge("g", "help", ("k",))
    with pytest.raises(ValueError, match=message):
        call(counter, gauge)


def test_a_name_registers_once() -> None:
    registry = Registry()
    Gauge("g", "help", registry=registry)
    with pytest.raises(ValueError, match="already registered"):
        Gauge("g", "help", registry=registry)


def test_clear_forgets_label_combinations() -> None:
    registry = Registry()
    gauge = Gauge("g", "help", ("k",), registry=registry)
    gauge.labels(k="a").set(1)
    gauge.clear()
    gauge.labels(k="b").set(2)
    assert exposition(registry) == '# HELP g help\n# TYPE g gauge\ng{k="b"} 2.0\n'
