"""The allocator's published state and its one writer: the lock every mutation holds, the
devices as published (withheld CPUs left out) with their generation, the device health, the
shared pool's watchers, and what follows each publish (saved generations, metrics, warnings)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dracpu.allocator import claims
from dracpu.allocator.claims.memory import usage as memory_usage
from dracpu.allocator.domain.device_health import STATUSES, HealthBook, assess
from dracpu.allocator.domain.devices import DeviceModel, DeviceOptions, build_devices
from dracpu.allocator.store import checkpoint, records
from dracpu.core import metrics
from dracpu.core.changes import Changes
from dracpu.core.cpuset import CPUSet
from dracpu.core.errors import ConfigError, StateError, UnavailableError
from dracpu.core.log import get_logger

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

log = get_logger(__name__)


@dataclass(frozen=True, slots=True)
class SharedPoolView:
    cpus: CPUSet
    reserved: CPUSet
    online: CPUSet
    exclusive: CPUSet
    generation: int
    isolated: CPUSet = field(default_factory=CPUSet)
    on_isolated: bool = False


def pool_view(state: claims.NodeState) -> SharedPoolView:
    return SharedPoolView(
        cpus=state.shared,
        reserved=state.reserved,
        online=state.online,
        exclusive=state.exclusive,
        generation=state.pool_generation,
        isolated=state.machine.isolated,
        on_isolated=state.shared_on_isolated,
    )


class PublishedDevices:
    """The devices as published: a state's devices without its withheld CPUs, rebuilt only
    when those change, and their generation, which moves whenever they change."""

    def __init__(self) -> None:
        self.generation = 0
        self._model: DeviceModel | None = None
        self._source: tuple[DeviceModel, CPUSet] | None = None

    def of(self, state: claims.NodeState) -> DeviceModel:
        """`state`'s devices without its withheld CPUs, rebuilt only when those change."""
        source = (state.devices, state.withheld)
        if self._model is None or self._source != source:
            try:
                model = (
                    state.devices
                    if not state.withheld
                    else build_devices(state.machine, state.devices.options, state.withheld)
                )
            except ConfigError as exc:
                # An attribute the API server would refuse (the CPU list of a group the
                # withheld CPUs fragment): keep publishing the last devices whole, never a
                # partial or truncated one; a prepare still checks every CPU it hands out.
                if self._model is None:
                    raise
                log.error("cannot publish the devices; keeping the last ones", error=str(exc))
                self._source = source
                return self._model
            if self._model is not None and model.fingerprint != self._model.fingerprint:
                self.generation += 1
                log.info(
                    2,
                    "published devices changed",
                    withheld=state.withheld.format(),
                    floor=state.floor.format(),
                    unaccounted=state.unaccounted.format(),
                    devices_generation=self.generation,
                )
            self._model, self._source = model, source
        return self._model

    def restart(
        self,
        state: claims.NodeState,
        last: records.NodeFile | checkpoint.Checkpoint | None,
    ) -> None:
        """At start-up: the recovered state's devices, their generation continuing the saved
        one, and moving on when they are not the devices published last."""
        self._model = None
        published = self.of(state)
        self.generation = (last.devices_generation if last else 0) + (
            0 if last is not None and last.devices_fingerprint == published.fingerprint else 1
        )


class LiveState:
    """The published `claims.NodeState` and everything that follows it. Mutations hold `lock`
    from choosing a new state until it is durable and published."""

    def __init__(
        self,
        *,
        state_dir: Path,
        cdi_dir: Path,
        options: DeviceOptions,
        registry: CollectorRegistry | None = None,
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self.state_dir = state_dir
        self.cdi_dir = cdi_dir
        self.options = options
        self.clock = clock
        self.lock = asyncio.Lock()
        # The published state, None while starting (`state` raises then instead).
        self.current: claims.NodeState | None = None
        self.devices = PublishedDevices()
        self._warned_shortfall = 0
        self._watchers: set[asyncio.Queue[SharedPoolView]] = set()
        # Set at every publish and health assessment: WatchDevices compares and sends.
        self.device_changes = Changes()
        self.metrics: dict[str, Any] = metrics.build("allocator", registry) if registry else {}
        self.health = HealthBook()
        self.topology_error = ""

    @property
    def ready(self) -> bool:
        return self.current is not None

    @property
    def state(self) -> claims.NodeState:
        if self.current is None:
            raise UnavailableError("the allocator is starting: topology or state not loaded yet")
        return self.current

    def node_file(self, state: claims.NodeState) -> records.NodeFile:
        return records.NodeFile(
            pool_generation=state.pool_generation,
            claims_generation=state.claims_generation,
            devices_generation=self.devices.generation,
            devices_fingerprint=self.devices.of(state).fingerprint,
            meta={
                "mode": self.options.mode,
                "groupBy": state.devices.group_by,
                "reserved": self.options.reserved.format(),
            },
        )

    def write_records(
        self, old: claims.NodeState, new: claims.NodeState, uids: Iterable[str]
    ) -> None:
        """Make the record files of `uids` match `new` (blocking I/O, in a thread). A failure
        puts back the files already changed, so disk and the published state agree again."""
        done: list[str] = []
        try:
            for uid in uids:
                record = new.records.get(uid)
                if record is old.records.get(uid):
                    continue
                if record is None:
                    records.remove_record(self.state_dir, uid)
                else:
                    records.write_record(self.state_dir, record)
                done.append(uid)
        except Exception:
            for uid in done:
                previous = old.records.get(uid)
                try:
                    if previous is None:
                        records.remove_record(self.state_dir, uid)
                    else:
                        records.write_record(self.state_dir, previous)
                except StateError as exc:
                    log.error("cannot roll back claim record", claim=uid, error=str(exc))
            raise

    # ---- publishing ------------------------------------------------------------------------

    def publish(self, state: claims.NodeState) -> None:
        """`state` becomes the published one: its devices, the warnings and metrics it calls
        for, the shared pool's watchers told when the pool moved; then its generations saved
        (what it reads of the state first, what it writes last)."""
        previous = self.current
        self.current = state
        self.devices.of(state)
        self._check_shortfall(state)
        if self.metrics:
            summary = claims.summary(state)
            self.metrics["dra_cpu_allocated_cpus"].set(summary.allocated)
            self.metrics["dra_cpu_available_cpus"].set(summary.available)
            self.metrics["dra_cpu_reserved_cpus"].set(summary.reserved)
            self.metrics["dra_cpu_draining_cpus"].set(
                sum(len(r.cpus) for r in state.draining.values())  # claims' CPUs are disjoint
            )
            self.metrics["dra_cpu_resource_claims_active"].set(summary.active_claims)
            self.metrics["dra_cpu_resource_claims_memory_placed"].set(
                sum(1 for r in state.records.values() if r.memory_nodes)
            )
            if state.devices.options.publish_memory:
                self._memory_metrics(state)
        if previous is None or previous.pool_generation != state.pool_generation:
            self._pool_changed(previous, state)
        self.device_changes.notify()
        if previous is not None and (
            previous.pool_generation,
            previous.claims_generation,
        ) != (state.pool_generation, state.claims_generation):
            try:
                records.save_generations(
                    self.state_dir, state.pool_generation, state.claims_generation
                )
            except StateError as exc:
                # The claims themselves are durable; only a restart's generations may repeat.
                log.error("cannot save generations", error=str(exc))

    def _memory_metrics(self, state: claims.NodeState) -> None:
        claimed = self.metrics["dra_cpu_memory_claimed_bytes"]
        free = self.metrics["dra_cpu_memory_free_bytes"]
        claimed.clear()
        free.clear()
        for node, kind, held, left in memory_usage(state):
            claimed.labels(numa_node=str(node), kind=kind).set(held)
            free.labels(numa_node=str(node), kind=kind).set(left)

    def _pool_changed(self, previous: claims.NodeState | None, state: claims.NodeState) -> None:
        if state.shared_on_isolated and (previous is None or not previous.shared_on_isolated):
            log.warning(
                "shared pool runs on isolated CPUs: no other CPU is free",
                shared=state.shared.format(),
                isolated=state.machine.isolated.format(),
            )
        elif previous is not None and previous.shared_on_isolated and not state.shared_on_isolated:
            log.info(0, "shared pool left the isolated CPUs", shared=state.shared.format())
        view = pool_view(state)
        for queue in self._watchers:
            queue.put_nowait(view)

    def _check_shortfall(self, state: claims.NodeState) -> None:
        missing = claims.shortfall(state)
        if missing and missing != self._warned_shortfall:
            log.warning(
                "shared pool below its minimum: claims hold CPUs it needs",
                shared=state.shared.format() or "(none)",
                minimum=state.min_shared,
                exclusive=state.exclusive.format(),
            )
        self._warned_shortfall = missing

    # ---- device health ---------------------------------------------------------------------

    def assess_health(self, state: claims.NodeState) -> None:
        before = self.health
        after = assess(
            before, state.devices, state.machine.cpu_set, self.topology_error, time.time()
        )
        self.health = after
        self.device_changes.notify()
        for name, entry in after.entries.items():
            old = before.entries.get(name)
            if old is not None and (old.status, old.message) == (entry.status, entry.message):
                continue
            if entry.status == "Healthy":
                if old is not None:
                    log.info(0, "device healthy again", device=name)
            else:
                log.warning(
                    "device not healthy", device=name, health=entry.status, reason=entry.message
                )
        if self.metrics:
            for status in STATUSES:
                self.metrics["dra_cpu_devices"].labels(health=status).set(after.count(status))
            unhealthy = self.metrics["dra_cpu_device_unhealthy"]
            unhealthy.clear()
            for name, entry in after.entries.items():
                if entry.status != "Healthy":
                    unhealthy.labels(device=name, health=entry.status).set(1)

    # ---- shared pool watchers --------------------------------------------------------------

    def subscribe(self) -> asyncio.Queue[SharedPoolView]:
        queue: asyncio.Queue[SharedPoolView] = asyncio.Queue()
        self._watchers.add(queue)
        return queue

    def unsubscribe(self, queue: asyncio.Queue[SharedPoolView]) -> None:
        self._watchers.discard(queue)
