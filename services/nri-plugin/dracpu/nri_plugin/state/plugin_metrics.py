"""The nri-plugin's own metrics (definitions in dracpu.core.metrics, owner "nri-plugin")."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

from dracpu.core.metrics import build, exposition, service_registry


class NRIMetrics:
    def __init__(self) -> None:
        self.registry = service_registry()
        collectors = build("nri-plugin", self.registry)
        self._updates = collectors["dra_cpu_nri_shared_updates_total"]
        self._pending = collectors["dra_cpu_nri_shared_pending_containers"]
        self._cost = collectors["dra_cpu_nri_update_cost_seconds"]
        self._disconnects = collectors["dra_cpu_nri_runtime_disconnects_total"]
        self._window = collectors["dra_cpu_nri_unpinned_window_seconds"]
        self._repinned = collectors["dra_cpu_nri_repinned_containers_total"]
        self._late = collectors["dra_cpu_nri_late_pins_total"]
        self._adopted = collectors["dra_cpu_nri_adopted_containers_total"]
        self._kept = collectors["dra_cpu_nri_updates_kept_total"]

    def pushed(self, applied: int, failed: int, unknown: int, pending: int, cost: float) -> None:
        assert isinstance(self._updates, Counter)
        assert isinstance(self._pending, Gauge) and isinstance(self._cost, Gauge)
        self._updates.labels(result="success").inc(applied)
        self._updates.labels(result="error").inc(failed)
        self._updates.labels(result="unknown").inc(unknown)
        self._pending.set(pending)
        self._cost.set(cost)

    def disconnected(self) -> None:
        assert isinstance(self._disconnects, Counter)
        self._disconnects.inc()

    def resynchronized(self, window_seconds: float, repinned: int) -> None:
        assert isinstance(self._window, Gauge) and isinstance(self._repinned, Counter)
        self._window.set(window_seconds)
        self._repinned.inc(repinned)

    def late_pinned(self, count: int) -> None:
        assert isinstance(self._late, Counter)
        self._late.inc(count)

    def adopted(self) -> None:
        assert isinstance(self._adopted, Counter)
        self._adopted.inc()

    def update_kept(self) -> None:
        assert isinstance(self._kept, Counter)
        self._kept.inc()

    def text(self) -> str:
        return exposition(self.registry)
