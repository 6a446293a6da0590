"""The dra-plugin's own dra_cpu_* collectors (definitions in dracpu.core.metrics)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from dracpu.core import metrics


class PluginMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or metrics.service_registry()
        collectors = metrics.build("dra-plugin", self.registry)
        prepare = collectors["dra_cpu_prepare_claims_total"]
        unprepare = collectors["dra_cpu_unprepare_claims_total"]
        duration = collectors["dra_cpu_prepare_claim_duration_seconds"]
        assert isinstance(prepare, Counter) and isinstance(unprepare, Counter)
        assert isinstance(duration, Histogram)
        self._prepare, self._unprepare, self._duration = prepare, unprepare, duration
        missing = collectors["dra_cpu_api_feature_missing"]
        assert isinstance(missing, Gauge)
        self._missing = missing
        writes, pending = (
            collectors["dra_cpu_claim_status_writes_total"],
            collectors["dra_cpu_claim_status_pending"],
        )
        assert isinstance(writes, Counter) and isinstance(pending, Gauge)
        self._status_writes, self._status_pending = writes, pending

    def feature_missing(self, feature: str) -> None:
        self._missing.labels(feature=feature).set(1)

    def claim_status_written(self, result: str) -> None:
        self._status_writes.labels(result=result).inc()

    def claim_status_pending(self, count: int) -> None:
        self._status_pending.set(count)

    def prepared(self, result: str, seconds: float) -> None:
        self._prepare.labels(result=result).inc()
        self._duration.observe(seconds)

    def unprepared(self, result: str) -> None:
        self._unprepare.labels(result=result).inc()

    def exposition(self) -> str:
        return metrics.exposition(self.registry)
