"""The driver's `dra_cpu_*` metrics: one definition each, owned by the service that observes it,
and the counters, gauges and histograms that record them.

Definitions live here so `dracpu introspect metrics` can describe them without starting any
service, and so each service builds exactly the collectors it owns in its own registry; the api
sidecar concatenates the services' expositions into the pod's single /metrics endpoint.

The collectors are a few dozen lines rather than prometheus_client: importing that package
loads its HTTP servers, WSGI and e-mail modules, some 3.5 MB in each of the five processes,
for three metric types and one text format (Prometheus text exposition 0.0.4, written as
prometheus_client writes it). Values are updated from the event loop's thread only.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal, Self

MetricType = Literal["counter", "gauge", "histogram"]

# Prepare latency: sub-millisecond local work up to the kubelet's 45 s deadline.
DURATION_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    45,
)
CPU_COUNT_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


@dataclass(frozen=True)
class MetricSpec:
    name: str
    type: MetricType
    help: str
    owner: str  # the service that records it
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()


SPECS: tuple[MetricSpec, ...] = (
    MetricSpec(
        "dra_cpu_allocated_cpus",
        "gauge",
        "CPUs currently allocated to prepared resource claims.",
        "allocator",
    ),
    MetricSpec(
        "dra_cpu_available_cpus",
        "gauge",
        "CPUs still available for allocation after reserved and active claim CPUs are excluded.",
        "allocator",
    ),
    MetricSpec(
        "dra_cpu_reserved_cpus",
        "gauge",
        "CPUs excluded from DRA management by driver configuration.",
        "allocator",
    ),
    MetricSpec(
        "dra_cpu_resource_claims_active",
        "gauge",
        "Resource claims currently recorded as active by the allocation store.",
        "allocator",
    ),
    MetricSpec(
        "dra_cpu_resource_claims_memory_placed",
        "gauge",
        "Active resource claims whose containers take memory only from their CPUs' NUMA nodes.",
        "allocator",
    ),
    MetricSpec(
        "dra_cpu_devices",
        "gauge",
        "Published devices (and devices withdrawn because their CPUs went offline) by health.",
        "allocator",
        labels=("health",),
    ),
    MetricSpec(
        "dra_cpu_device_unhealthy",
        "gauge",
        "1 for each device that is Unhealthy (CPUs offline) or Unknown (topology unreadable).",
        "allocator",
        labels=("device", "health"),
    ),
    MetricSpec(
        "dra_cpu_prepare_claims_total",
        "counter",
        "Per-claim PrepareResourceClaims results.",
        "dra-plugin",
        labels=("result",),
    ),
    MetricSpec(
        "dra_cpu_unprepare_claims_total",
        "counter",
        "Per-claim UnprepareResourceClaims results.",
        "dra-plugin",
        labels=("result",),
    ),
    MetricSpec(
        "dra_cpu_prepare_claim_duration_seconds",
        "histogram",
        "Per-claim prepare latency in seconds.",
        "dra-plugin",
        buckets=DURATION_BUCKETS,
    ),
    MetricSpec(
        "dra_cpu_api_feature_missing",
        "gauge",
        "1 for each optional API feature the API server lacks (the driver works on without it).",
        "dra-plugin",
        labels=("feature",),
    ),
    MetricSpec(
        "dra_cpu_claim_status_writes_total",
        "counter",
        "Outcomes of writing claims' status.devices (success, retry, gone, refused, unsupported).",
        "dra-plugin",
        labels=("result",),
    ),
    MetricSpec(
        "dra_cpu_claim_status_pending",
        "gauge",
        "Claims whose status.devices the dra-plugin has yet to write.",
        "dra-plugin",
    ),
    MetricSpec(
        "dra_cpu_nri_shared_updates_total",
        "counter",
        "Per-container outcomes of shared-pool UpdateContainers pushes (unknown: no answer).",
        "nri-plugin",
        labels=("result",),
    ),
    MetricSpec(
        "dra_cpu_nri_shared_pending_containers",
        "gauge",
        "Shared containers not yet confirmed on the current shared pool after the last push.",
        "nri-plugin",
    ),
    MetricSpec(
        "dra_cpu_nri_update_cost_seconds",
        "gauge",
        "Measured runtime cost of one container update (sizes UpdateContainers batches).",
        "nri-plugin",
    ),
    MetricSpec(
        "dra_cpu_nri_runtime_disconnects_total",
        "counter",
        "Times the runtime connection was lost; containers started meanwhile run unpinned.",
        "nri-plugin",
    ),
    MetricSpec(
        "dra_cpu_nri_unpinned_window_seconds",
        "gauge",
        "Seconds from noticing the lost runtime connection to re-pinning at Synchronize.",
        "nri-plugin",
    ),
    MetricSpec(
        "dra_cpu_nri_repinned_containers_total",
        "counter",
        "Containers whose cpuset Synchronize had to correct after a (re)connect.",
        "nri-plugin",
    ),
    MetricSpec(
        "dra_cpu_nri_late_pins_total",
        "counter",
        "Claimed containers pinned only once already running: the runtime started them without "
        "the plugin's CreateContainer answer (plugin_request_timeout, or no plugin connected).",
        "nri-plugin",
    ),
    MetricSpec(
        "dra_cpu_claim_allocated_cpus",
        "histogram",
        "CPUs allocated for each newly successful claim allocation.",
        "allocator",
        buckets=CPU_COUNT_BUCKETS,
    ),
)

RESULTS = ("success", "error", "unknown")


Labels = tuple[tuple[str, str], ...]


class Registry:
    """The collectors one process exposes, in the order they were created."""

    def __init__(self) -> None:
        self._collectors: dict[str, Collector] = {}

    def register(self, collector: Collector) -> None:
        if collector.name in self._collectors:
            raise ValueError(f"metric {collector.name} is already registered")
        self._collectors[collector.name] = collector

    def __iter__(self) -> Iterator[Collector]:
        return iter(list(self._collectors.values()))


class Collector:
    """One metric family. With label names, `labels(...)` gives the child that holds the value
    of one label combination; without, the collector holds its value itself."""

    type: ClassVar[MetricType]

    def __init__(
        self,
        name: str,
        help: str,
        labelnames: Sequence[str] = (),
        registry: Registry | None = None,
    ) -> None:
        self.name = name
        self.help = help
        self.labelnames = tuple(labelnames)
        self._children: dict[tuple[str, ...], Self] = {}
        if registry is not None:
            registry.register(self)

    def _child(self) -> Self:
        return type(self)(self.name, self.help)

    def labels(self, *values: object, **named: object) -> Self:
        if named:
            if values or sorted(named) != sorted(self.labelnames):
                raise ValueError(f"{self.name}: labels are {self.labelnames}, got {sorted(named)}")
            values = tuple(named[label] for label in self.labelnames)
        if not self.labelnames or len(values) != len(self.labelnames):
            raise ValueError(f"{self.name}: labels are {self.labelnames}, got {len(values)} values")
        key = tuple(str(value) for value in values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = self._child()
        return child

    def clear(self) -> None:
        """Forget every label combination."""
        self._children.clear()

    @property
    def family(self) -> str:
        """The name HELP and TYPE declare."""
        return self.name

    def samples(self) -> Iterator[tuple[str, Labels, float]]:
        if not self.labelnames:
            yield from self._samples(())
            return
        for key, child in list(self._children.items()):
            yield from child._samples(tuple(zip(self.labelnames, key, strict=True)))

    def _samples(self, labels: Labels) -> Iterator[tuple[str, Labels, float]]:
        raise NotImplementedError


class Counter(Collector):
    type = "counter"
    _value = 0.0  # until counted: an instance attribute from the first inc on

    def __init__(
        self,
        name: str,
        help: str,
        labelnames: Sequence[str] = (),
        registry: Registry | None = None,
    ) -> None:
        # As prometheus_client: the family is declared and sampled with the _total suffix.
        super().__init__(name.removesuffix("_total"), help, labelnames, registry)

    def inc(self, amount: float = 1) -> None:
        if amount < 0:
            raise ValueError(f"{self.name}: counters only go up, got {amount}")
        self._value += amount

    @property
    def family(self) -> str:
        return self.name + "_total"

    def _samples(self, labels: Labels) -> Iterator[tuple[str, Labels, float]]:
        yield self.name + "_total", labels, self._value


class Gauge(Collector):
    type = "gauge"
    _value = 0.0  # until set: an instance attribute from the first change on

    def set(self, value: float) -> None:
        self._value = float(value)

    def inc(self, amount: float = 1) -> None:
        self._value += amount

    def dec(self, amount: float = 1) -> None:
        self._value -= amount

    def _samples(self, labels: Labels) -> Iterator[tuple[str, Labels, float]]:
        yield self.name, labels, self._value


class Histogram(Collector):
    type = "histogram"

    def __init__(
        self,
        name: str,
        help: str,
        labelnames: Sequence[str] = (),
        registry: Registry | None = None,
        buckets: Sequence[float] = DURATION_BUCKETS,
    ) -> None:
        super().__init__(name, help, labelnames, registry)
        bounds = sorted(float(b) for b in buckets)
        if not bounds or bounds[-1] != math.inf:
            bounds.append(math.inf)
        self.buckets = tuple(bounds)
        self._counts = [0] * len(self.buckets)
        self._sum = 0.0

    def _child(self) -> Self:
        return type(self)(self.name, self.help, buckets=self.buckets)

    def observe(self, value: float) -> None:
        self._sum += value
        for i, bound in enumerate(self.buckets):
            if value <= bound:
                self._counts[i] += 1
                break

    def _samples(self, labels: Labels) -> Iterator[tuple[str, Labels, float]]:
        total = 0
        for bound, count in zip(self.buckets, self._counts, strict=True):
            total += count
            yield self.name + "_bucket", (*labels, ("le", _number(bound))), total
        yield self.name + "_count", labels, total
        yield self.name + "_sum", labels, self._sum


def build(owner: str, registry: Registry) -> dict[str, Counter | Gauge | Histogram]:
    """Create, in `registry`, the collectors `owner` records, keyed by metric name."""
    collectors: dict[str, Counter | Gauge | Histogram] = {}
    for spec in SPECS:
        if spec.owner != owner:
            continue
        collector: Counter | Gauge | Histogram
        if spec.type == "counter":
            collector = Counter(spec.name, spec.help, spec.labels, registry=registry)
            if "result" in spec.labels:
                for result in RESULTS:
                    collector.labels(result=result)
        elif spec.type == "gauge":
            collector = Gauge(spec.name, spec.help, spec.labels, registry=registry)
        else:
            collector = Histogram(
                spec.name, spec.help, spec.labels, buckets=spec.buckets, registry=registry
            )
        collectors[spec.name] = collector
    return collectors


def _number(value: float) -> str:
    """A sample value as Go (and prometheus_client's floatToGoString) writes it."""
    if value == math.inf:
        return "+Inf"
    if value == -math.inf:
        return "-Inf"
    if math.isnan(value):
        return "NaN"
    text = repr(float(value))
    dot = text.find(".")
    # Go switches to exponents sooner than Python (only positive values matter: le bounds).
    if value > 0 and dot > 6:
        mantissa = f"{text[0]}.{text[1:dot]}{text[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+0{dot - 1}"
    return text


def _label_value(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def exposition(registry: Registry) -> str:
    """The registry's collectors in the Prometheus text format (0.0.4)."""
    lines = []
    for collector in registry:
        help_text = collector.help.replace("\\", "\\\\").replace("\n", "\\n")
        lines.append(f"# HELP {collector.family} {help_text}")
        lines.append(f"# TYPE {collector.family} {collector.type}")
        for name, labels, value in collector.samples():
            if labels:
                pairs = ",".join(f'{k}="{_label_value(v)}"' for k, v in labels)
                lines.append(f"{name}{{{pairs}}} {_number(value)}")
            else:
                lines.append(f"{name} {_number(value)}")
    return "".join(line + "\n" for line in lines)


def describe() -> list[dict[str, object]]:
    """JSON-ready metadata for every dra_cpu_* metric (what `dracpu introspect metrics` prints)."""
    return [
        {"name": s.name, "type": s.type, "help": s.help, "labels": list(s.labels)} for s in SPECS
    ]
