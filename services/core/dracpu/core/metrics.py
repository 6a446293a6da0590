"""The driver's `dra_cpu_*` metrics: one definition each, owned by the service that observes it,
and the registry every service exposes them from.

Definitions live here so `dracpu introspect metrics` can describe them without starting any
service (and without importing prometheus_client), and so each service builds exactly the
collectors it owns, as prometheus_client collectors, in a registry of its own that also holds
prometheus_client's process, platform and garbage-collector collectors; the api sidecar merges
the services' expositions into the pod's single /metrics endpoint.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

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
        "CPUs a new resource claim can still get: the published devices' CPUs that no claim "
        "holds (reserved CPUs and the shared pool's minimum are never published).",
        "allocator",
    ),
    MetricSpec(
        "dra_cpu_draining_cpus",
        "gauge",
        "CPUs of unprepared claims still kept out of the shared pool because their container is "
        "known to run; they return to it when that container stops.",
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
        "dra_cpu_memory_claimed_bytes",
        "gauge",
        "Bytes of a NUMA node's memory device held by prepared claims, per kind (memory, "
        "hugepages-<size>).",
        "allocator",
        labels=("numa_node", "kind"),
    ),
    MetricSpec(
        "dra_cpu_memory_free_bytes",
        "gauge",
        "Bytes of a NUMA node's memory device no prepared claim holds, per kind.",
        "allocator",
        labels=("numa_node", "kind"),
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
        "Containers whose cpuset the runtime has not confirmed after the last push (shared"
        " ones off the current pool, claimed ones a Synchronize answer pinned).",
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
        "dra_cpu_nri_adopted_containers_total",
        "counter",
        "Containers the plugin first heard of after their creation (at PostStartContainer: the "
        "runtime created them while the plugin registered) and adopted then.",
        "nri-plugin",
    ),
    MetricSpec(
        "dra_cpu_nri_updates_kept_total",
        "counter",
        "Container updates another party asked of the runtime (the kubelet's CPU Manager, crictl "
        "update) whose cpuset the plugin answered with the container's own: its claim's CPUs or "
        "the shared pool.",
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

# Recorded by every gRPC service, through its supervisor (`dracpu.core.supervisor`), rather than
# built with the metrics one service owns.
EVERY_SERVICE = "every service"
LOOP_RESTARTS = MetricSpec(
    "dra_cpu_loop_restarts_total",
    "counter",
    "Restarts of a service's long-running loop after it failed or ended unexpectedly.",
    EVERY_SERVICE,
    ("service", "loop"),
)
SPECS = (*SPECS, LOOP_RESTARTS)

RESULTS = ("success", "error", "unknown")
# The families of prometheus_client's process, platform and GC collectors: every process of the
# pod exports them, so the api labels their samples with the service they came from.
PROCESS_FAMILY_PREFIXES = ("process_", "python_")


def service_registry() -> CollectorRegistry:
    """A service's own registry, holding the standard collectors of a Python process
    (process_*, python_info, python_gc_*); `build` adds the service's dra_cpu_* collectors."""
    import prometheus_client

    # No *_created samples: the exposition keeps the families and samples it always had.
    prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]
    found = prometheus_client.CollectorRegistry(auto_describe=True)
    prometheus_client.ProcessCollector(registry=found)
    prometheus_client.PlatformCollector(registry=found)
    prometheus_client.GCCollector(registry=found)
    return found


def build(owner: str, registry: CollectorRegistry) -> dict[str, Counter | Gauge | Histogram]:
    """Create, in `registry`, the collectors `owner` records, keyed by metric name."""
    import prometheus_client

    prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]
    collectors: dict[str, Counter | Gauge | Histogram] = {}
    for spec in SPECS:
        if spec.owner != owner:
            continue
        collector: Counter | Gauge | Histogram
        if spec.type == "counter":
            collector = prometheus_client.Counter(
                spec.name, spec.help, spec.labels, registry=registry
            )
            if "result" in spec.labels:
                for result in RESULTS:
                    collector.labels(result=result)
        elif spec.type == "gauge":
            collector = prometheus_client.Gauge(
                spec.name, spec.help, spec.labels, registry=registry
            )
        else:
            collector = prometheus_client.Histogram(
                spec.name, spec.help, spec.labels, buckets=spec.buckets, registry=registry
            )
        collectors[spec.name] = collector
    return collectors


def loop_restarts(registry: CollectorRegistry) -> Counter:
    """The restart counter of a service's supervised loops, in `registry`."""
    import prometheus_client

    prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]
    spec = LOOP_RESTARTS
    return prometheus_client.Counter(spec.name, spec.help, spec.labels, registry=registry)


def exposition(registry: CollectorRegistry) -> str:
    """The registry's collectors in the Prometheus text format (0.0.4)."""
    from prometheus_client import generate_latest

    return generate_latest(registry).decode()


def describe() -> list[dict[str, object]]:
    """JSON-ready metadata for every dra_cpu_* metric (what `dracpu introspect metrics` prints)."""
    return [
        {"name": s.name, "type": s.type, "help": s.help, "labels": list(s.labels)} for s in SPECS
    ]
