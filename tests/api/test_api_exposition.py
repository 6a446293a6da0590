"""Merging the services' metrics into the pod's one exposition."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.parser import text_string_to_metric_families

from dracpu.api.exposition import merge
from dracpu.api.metrics import ApiMetrics
from dracpu.core.metrics import SPECS, build, exposition, loop_restarts, service_registry

SERVICES = ("topology", "allocator", "dra-plugin", "nri-plugin", "api")

ALLOCATOR = """# HELP dra_cpu_allocated_cpus CPUs currently allocated.
# TYPE dra_cpu_allocated_cpus gauge
dra_cpu_allocated_cpus 4.0
# HELP process_open_fds Number of open file descriptors.
# TYPE process_open_fds gauge
process_open_fds 12.0
"""
PLUGIN = """# HELP dra_cpu_prepare_claims_total Per-claim results.
# TYPE dra_cpu_prepare_claims_total counter
dra_cpu_prepare_claims_total{result="success"} 3.0
dra_cpu_prepare_claims_total{result="error"} 0.0
# HELP process_open_fds Number of open file descriptors.
# TYPE process_open_fds gauge
process_open_fds 9.0
"""


@pytest.mark.parametrize(
    ("sources", "expected"),
    [
        pytest.param([], "", id="nothing"),
        pytest.param([("allocator", "")], "", id="empty-text"),
        pytest.param(
            [("allocator", "# HELP a x\n# TYPE a gauge\na 1.0\n")],
            "# HELP a x\n# TYPE a gauge\na 1.0\n",
            id="one-source-unchanged",
        ),
        pytest.param(
            [("allocator", ALLOCATOR), ("dra-plugin", PLUGIN)],
            "# HELP dra_cpu_allocated_cpus CPUs currently allocated.\n"
            "# TYPE dra_cpu_allocated_cpus gauge\n"
            "dra_cpu_allocated_cpus 4.0\n"
            "# HELP process_open_fds Number of open file descriptors.\n"
            "# TYPE process_open_fds gauge\n"
            'process_open_fds{service="allocator"} 12.0\n'
            'process_open_fds{service="dra-plugin"} 9.0\n'
            "# HELP dra_cpu_prepare_claims_total Per-claim results.\n"
            "# TYPE dra_cpu_prepare_claims_total counter\n"
            'dra_cpu_prepare_claims_total{result="success"} 3.0\n'
            'dra_cpu_prepare_claims_total{result="error"} 0.0\n',
            id="shared-family-gets-service-label",
        ),
        pytest.param(
            [
                ("a", '# TYPE m gauge\nm{path="{x}",q="a\\"b"} 1\n'),
                ("b", "# TYPE m gauge\nm{} 2\n"),
            ],
            '# TYPE m gauge\nm{service="a",path="{x}",q="a\\"b"} 1\nm{service="b"} 2\n',
            id="labels-with-braces-and-quotes",
        ),
        pytest.param(
            [("a", '# TYPE m gauge\nm{service="x"} 1\n'), ("b", "# TYPE m gauge\nm 2\n")],
            '# TYPE m gauge\nm{service="x"} 1\nm{service="b"} 2\n',
            id="existing-service-label-kept",
        ),
        pytest.param(
            [("allocator", "# TYPE process_open_fds gauge\nprocess_open_fds 7.0\n")],
            '# TYPE process_open_fds gauge\nprocess_open_fds{service="allocator"} 7.0\n',
            id="process-family-of-one-service-still-labelled",
        ),
        pytest.param(
            [("a", "untyped_metric 5\n# EOF\n")],
            "untyped_metric 5\n",
            id="undeclared-sample-and-eof",
        ),
    ],
)
def test_merge(sources: list[tuple[str, str]], expected: str) -> None:
    assert merge(sources) == expected


def _registry_text(owner: str) -> str:
    registry = service_registry()
    collectors = build(owner, registry)
    labels = {spec.name: spec.labels for spec in SPECS}
    for name, collector in collectors.items():
        if isinstance(collector, Gauge):
            names = labels[name]
            (collector.labels(*(f"x-{n}" for n in names)) if names else collector).set(3)
        elif isinstance(collector, Histogram):
            collector.observe(2)
        elif isinstance(collector, Counter) and labels[name]:
            collector.labels(result="success").inc()
        elif isinstance(collector, Counter):
            collector.inc()
    # Every gRPC service's supervisor counts its loops' restarts in the same registry.
    loop_restarts(registry).labels(service=owner, loop="watch").inc()
    return exposition(registry)


def test_every_reference_metric_survives_the_merge_once() -> None:
    text = merge(
        [
            (owner, _registry_text(owner))
            for owner in ("topology", "allocator", "dra-plugin", "nri-plugin")
        ]
    )
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for spec in SPECS:
        assert spec.name.removesuffix("_total") in families, spec.name
        assert text.count(f"# HELP {spec.name} ") == 1
        assert text.count(f"# TYPE {spec.name} ") == 1


def test_the_pods_exposition_has_each_family_once_and_every_process_by_service() -> None:
    texts = [(owner, _registry_text(owner)) for owner in SERVICES[:-1]]
    text = merge([*texts, ("api", ApiMetrics().text())])
    families = list(text_string_to_metric_families(text))
    names = [f.name for f in families]
    assert len(names) == len(set(names))
    declarations = [tuple(line.split(" ", 3)[1:3]) for line in text.splitlines() if line[:1] == "#"]
    assert len(declarations) == len(set(declarations)) == 2 * len(names)
    by_name = {f.name: f for f in families}
    for name in ("process_resident_memory_bytes", "process_cpu_seconds", "python_info"):
        services = [s.labels["service"] for s in by_name[name].samples]
        assert sorted(services) == sorted(SERVICES), name
    rss = {s.labels["service"]: s.value for s in by_name["process_resident_memory_bytes"].samples}
    assert all(value > 0 for value in rss.values())
    # The loop restarts carry their service already: kept as they are, once per service.
    restarts = by_name["dra_cpu_loop_restarts"].samples
    assert sorted((s.labels["service"], s.labels["loop"]) for s in restarts) == sorted(
        (service, "watch") for service in SERVICES[:-1]
    )
    # The driver's own families stay unlabelled: each has one owner.
    (allocated,) = by_name["dra_cpu_allocated_cpus"].samples
    assert allocated.labels == {}


_names = st.sampled_from(["alpha", "beta", "gamma_total", "delta_seconds"])
_services = st.sampled_from(["topology", "allocator", "dra-plugin", "nri-plugin", "api"])


@st.composite
def _exposition(draw: st.DrawFn) -> str:
    lines = []
    for name in draw(st.lists(_names, unique=True, max_size=4)):
        lines += [f"# HELP {name} help of {name}", f"# TYPE {name} gauge"]
        for value in draw(st.lists(st.integers(0, 9), unique=True, max_size=3)):
            lines.append(f'{name}{{k="{value}"}} {value}')
    return "\n".join(lines) + "\n"


@given(st.lists(st.tuples(_services, _exposition()), unique_by=lambda s: s[0], max_size=5))
def test_merged_text_parses_with_one_declaration_per_family(
    sources: list[tuple[str, str]],
) -> None:
    text = merge(sources)
    declarations = [line for line in text.splitlines() if line.startswith("#")]
    assert len(declarations) == len(set(declarations))
    # Every sample survives, and no two series collide.
    samples = [
        (s.name, tuple(sorted(s.labels.items())))
        for family in text_string_to_metric_families(text)
        for s in family.samples
    ]
    assert len(samples) == len(set(samples))
    expected = sum(
        1
        for _, source in sources
        for line in source.splitlines()
        if line and not line.startswith("#")
    )
    assert len(samples) == expected
