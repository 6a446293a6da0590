"""The allocator's live state: one serialized writer around the pure claim rules, making every
change durable (CDI spec, claim record) before it is published or acknowledged.

Each claim has its own record file (`records`), so a mutation writes only the claims it
changes. Order of operations, so that a kill -9 at any point loses nothing acknowledged and
never puts a CPU in two claims:

- prepare: choose CPUs in a pending state (the lock keeps anyone else from choosing them) →
  write the CDI spec and the claim's record, both at once → publish → acknowledge. A failure
  drops the pending state and removes whichever of the two was written. A kill between the
  two leaves one alone, which start-up recovery completes (a spec becomes a record, a record
  gets its spec back); the claim was not acknowledged, and the kubelet retries or unprepares.
  Prepares that arrive while one is being written are taken together next (group commit):
  their files are written at once and published once, each acknowledged only when its own
  files are durable.
- unprepare: remove the CDI spec → remove the claim's record → publish. The CPUs stay
  exclusive until both are durable.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from dracpu.allocator import cdi, checkpoint, claims, records, recovery
from dracpu.allocator.device_health import STATUSES, HealthBook, assess
from dracpu.allocator.devices import DeviceModel, DeviceOptions, build_devices
from dracpu.allocator.durable import remove_durable, remove_stale_temps
from dracpu.core import metrics
from dracpu.core.cpuset import CPUSet
from dracpu.core.errors import (
    ConflictError,
    InsufficientCPUsError,
    StateError,
    UnavailableError,
)
from dracpu.core.log import get_logger
from dracpu.core.machine import Machine

log = get_logger("allocator")

T = TypeVar("T")


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


def _retrieve(task: asyncio.Future[Any]) -> None:
    # A mutation whose caller left still ends with a result or an error: consume it, so an
    # error is not reported as "never retrieved" (the handler already mapped it if it waited).
    if not task.cancelled():
        task.exception()


class NodeAllocator:
    def __init__(
        self,
        *,
        state_dir: Path,
        cdi_dir: Path,
        options: DeviceOptions,
        registry: metrics.Registry | None = None,
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self.state_dir = state_dir
        self.cdi_dir = cdi_dir
        self.options = options
        self._clock = clock
        self._lock = asyncio.Lock()
        self._state: claims.NodeState | None = None
        self._devices_generation = 0
        # The devices as published (withheld CPUs left out) and what they were built from.
        self._published: DeviceModel | None = None
        self._published_from: tuple[DeviceModel, CPUSet] | None = None
        self._warned_shortfall = 0
        self._watchers: set[asyncio.Queue[SharedPoolView]] = set()
        self._waiting: list[tuple[claims.PrepareInput, asyncio.Future[claims.PrepareOutcome]]] = []
        self._batches: asyncio.Task[None] | None = None
        self._leaving: list[tuple[str, asyncio.Future[claims.ClaimRecord | None]]] = []
        self._unprepares: asyncio.Task[None] | None = None
        self._metrics: dict[str, Any] = metrics.build("allocator", registry) if registry else {}
        self._health = HealthBook()
        self._topology_error = ""

    # ---- reads: snapshots of the published state ------------------------------------------

    @property
    def ready(self) -> bool:
        return self._state is not None

    @property
    def state(self) -> claims.NodeState:
        if self._state is None:
            raise UnavailableError("the allocator is starting: topology or state not loaded yet")
        return self._state

    @property
    def devices(self) -> tuple[DeviceModel, int]:
        """The devices to publish and their generation, which moves whenever they change."""
        return self._published_devices(self.state), self._devices_generation

    def _published_devices(self, state: claims.NodeState) -> DeviceModel:
        """`state`'s devices without its withheld CPUs, rebuilt only when those change."""
        source = (state.devices, state.withheld)
        if self._published is None or self._published_from != source:
            model = (
                state.devices
                if not state.withheld
                else build_devices(state.machine, state.devices.options, state.withheld)
            )
            if self._published is not None and model.fingerprint != self._published.fingerprint:
                self._devices_generation += 1
                log.info(
                    2,
                    "published devices changed",
                    withheld=state.withheld.format(),
                    floor=state.floor.format(),
                    unaccounted=state.unaccounted.format(),
                    devices_generation=self._devices_generation,
                )
            self._published, self._published_from = model, source
        return self._published

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

    def shared_pool(self) -> SharedPoolView:
        return pool_view(self.state)

    @property
    def device_health(self) -> HealthBook:
        return self._health

    # ---- device health -----------------------------------------------------------------------

    def _assess_health(self, state: claims.NodeState) -> None:
        before = self._health
        after = assess(
            before, state.devices, state.machine.cpu_set, self._topology_error, time.time()
        )
        self._health = after
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
        if self._metrics:
            for status in STATUSES:
                self._metrics["dra_cpu_devices"].labels(health=status).set(after.count(status))
            unhealthy = self._metrics["dra_cpu_device_unhealthy"]
            unhealthy.clear()
            for name, entry in after.entries.items():
                if entry.status != "Healthy":
                    unhealthy.labels(device=name, health=entry.status).set(1)

    async def topology_unreadable(self, error: str) -> None:
        """A topology refresh failed: devices are Unknown until one succeeds."""
        async with self._lock:
            if error != self._topology_error:
                self._topology_error = error
                self._assess_health(self.state)

    # ---- start-up ----------------------------------------------------------------------------

    async def start(self, machine: Machine) -> None:
        async with self._lock:
            state = await asyncio.to_thread(self._recover, machine)
            self._publish(state)
            self._assess_health(state)
        log.info(
            0,
            "allocator state loaded",
            claims=len(state.records),
            exclusive=state.exclusive.format(),
            shared=state.shared.format(),
            devices=len(state.devices.devices),
            devices_generation=self._devices_generation,
        )

    def _recover(self, machine: Machine) -> claims.NodeState:
        """Load, cross-check and rewrite the durable state (blocking I/O, in a thread)."""
        devices = build_devices(machine, self.options)
        claims_dir = records.claims_dir(self.state_dir)
        try:
            # Runtimes watch the CDI directory; it should exist before the first spec.
            self.cdi_dir.mkdir(mode=0o755, parents=True, exist_ok=True)
            self.state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise StateError(f"cannot create {exc.filename}: {exc.strerror or exc}") from None
        stale = (
            remove_stale_temps(self.cdi_dir, cdi.FILE_PREFIX)
            + remove_stale_temps(self.state_dir, checkpoint.FILE_NAME)
            + remove_stale_temps(self.state_dir, records.NODE_FILE)
            + remove_stale_temps(self.state_dir, records.GENERATIONS_FILE)
            + remove_stale_temps(claims_dir, "")
        )
        if stale:
            log.info(2, "removed temp files of writes cut short", files=",".join(sorted(stale)))
        node_file = self._load_trusted(records.load_node, records.node_path(self.state_dir))
        legacy = self._load_trusted(checkpoint.load, checkpoint.path_in(self.state_dir))
        loaded = records.load_records(self.state_dir)
        on_disk = dict(loaded.records) if loaded is not None else {}
        for bad in loaded.bad if loaded is not None else []:
            try:
                aside = records.move_aside(bad.path)
            except OSError as move_error:
                raise StateError(f"{bad.error}; cannot move it aside: {move_error}") from None
            log.error(
                "claim record cannot be trusted; moved aside, rebuilding the claim from its "
                "CDI spec",
                claim=bad.uid,
                error=bad.error,
                moved_to=str(aside),
            )
        saved: dict[str, claims.ClaimRecord] | None = None
        if loaded is not None or legacy is not None:
            # A migration cut short left both: the record files were written from the old
            # checkpoint, so either copy will do.
            saved = {r.uid: r for r in legacy.records} if legacy is not None else {}
            saved.update(on_disk)
        specs = list(cdi.read_specs(self.cdi_dir))
        if saved is None:
            # Silent only on a first start: nothing recorded and nothing on disk.
            log.info(
                0 if specs else 2,
                "no saved claim records; rebuilding them from CDI specs",
                cdi_dir=str(self.cdi_dir),
                specs=len(specs),
            )
        result = recovery.reconcile(
            saved,
            specs,
            machine.online,
            self.options.reserved,
            self._clock(),
        )
        for finding in result.findings:
            if finding.level == 0:
                log.warning(finding.message, **finding.fields)
            else:
                log.info(finding.level, finding.message, **finding.fields)
        previous = [p for p in (node_file, legacy) if p is not None]
        counted = records.read_generations(self.state_dir)
        pool_generation = max(
            [p.pool_generation for p in previous] + [counted[0] if counted else 0]
        )
        claims_generation = max(
            [p.claims_generation for p in previous] + [counted[1] if counted else 0]
        )
        last = previous[0] if previous else None
        state = claims.NodeState(
            machine=machine,
            devices=devices,
            records=result.records,
            pool_generation=pool_generation + 1,
            claims_generation=claims_generation + 1,
        )
        self._published = None
        published = self._published_devices(state)
        self._devices_generation = (last.devices_generation if last else 0) + (
            0 if last is not None and last.devices_fingerprint == published.fingerprint else 1
        )
        if state.unaccounted:
            log.warning(
                "claims prepared for other devices hold CPUs; those stay unpublished until "
                "the claims are released",
                cpus=state.unaccounted.format(),
                mode=devices.mode,
                group_by=devices.group_by,
            )
        for uid in result.rewrite_specs:
            cdi.write_spec(self.cdi_dir, uid, result.records[uid].cpus)
        try:
            claims_dir.mkdir(mode=0o700, exist_ok=True)
        except OSError as exc:
            raise StateError(f"cannot create {claims_dir}: {exc.strerror or exc}") from None
        for uid, record in sorted(result.records.items()):
            if on_disk.get(uid) != record:  # migrated, or rebuilt from a spec or adopted
                records.write_record(self.state_dir, record)
        kept_legacy = False
        for uid in result.set_aside:
            if uid in on_disk:
                aside = records.move_aside(records.record_path(self.state_dir, uid))
                log.error("claim record set aside", claim=uid, moved_to=str(aside))
            else:
                kept_legacy = True
        # Also makes the claims directory's own entry durable (one fsync of the state dir).
        records.write_node(self.state_dir, self._node_file(state))
        records.save_generations(
            self.state_dir, state.pool_generation, state.claims_generation, durable=True
        )
        if legacy is not None:
            # Only now that every record file is durable may the old checkpoint go.
            legacy_path = checkpoint.path_in(self.state_dir)
            if kept_legacy:
                aside = records.move_aside(legacy_path)
                log.error("old checkpoint kept: it held a claim set aside", moved_to=str(aside))
            else:
                remove_durable(legacy_path)
            log.info(
                0,
                "migrated the single-file checkpoint to one record file per claim",
                claims=len(legacy.records),
                claims_dir=str(claims_dir),
            )
        return state

    def _load_trusted(self, load: Callable[[Path], T], path: Path) -> T | None:
        """A saved file, None when absent; one that cannot be trusted is moved aside."""
        try:
            return load(self.state_dir)
        except (records.CorruptRecordError, checkpoint.CorruptCheckpointError) as exc:
            error = str(exc)
        try:
            aside = records.move_aside(path)
        except OSError as move_error:
            raise StateError(f"{error}; cannot move it aside: {move_error}") from None
        log.error("saved state cannot be trusted; moved aside", error=error, moved_to=str(aside))
        return None

    # ---- mutations ---------------------------------------------------------------------------

    def _node_file(self, state: claims.NodeState) -> records.NodeFile:
        return records.NodeFile(
            pool_generation=state.pool_generation,
            claims_generation=state.claims_generation,
            devices_generation=self._devices_generation,
            devices_fingerprint=self._published_devices(state).fingerprint,
            meta={
                "mode": self.options.mode,
                "groupBy": state.devices.group_by,
                "reserved": self.options.reserved.format(),
            },
        )

    def _write_records(
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

    async def _write_prepared(
        self, record: claims.ClaimRecord, before: claims.ClaimRecord | None
    ) -> None:
        """A prepared claim's spec and record, written at the same time: their fsyncs overlap,
        and start-up recovery completes either one found alone. The spec is written again even
        for a claim already prepared (it may have been lost, e.g. /var/run wiped); the record
        only when it changed. A failure puts back what this wrote."""
        jobs: list[Awaitable[object]] = [
            self._io(cdi.write_spec, self.cdi_dir, record.uid, record.cpus)
        ]
        if record is not before:
            jobs.append(self._io(records.write_record, self.state_dir, record))
        written = await asyncio.gather(*jobs, return_exceptions=True)
        errors = [r for r in written if isinstance(r, BaseException)]
        if not errors:
            return
        if before is None and not isinstance(written[0], BaseException):
            await self._undo_spec(record.uid)
        if len(written) > 1 and not isinstance(written[1], BaseException):
            try:
                if before is None:
                    await self._io(records.remove_record, self.state_dir, record.uid)
                else:
                    await self._io(records.write_record, self.state_dir, before)
            except StateError as exc:
                log.error("cannot roll back claim record", claim=record.uid, error=str(exc))
        raise errors[0]

    def _publish(self, state: claims.NodeState) -> None:
        previous = self._state
        self._state = state
        self._published_devices(state)
        self._check_shortfall(state)
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
        if self._metrics:
            summary = claims.summary(state)
            self._metrics["dra_cpu_allocated_cpus"].set(summary.allocated)
            self._metrics["dra_cpu_available_cpus"].set(summary.available)
            self._metrics["dra_cpu_reserved_cpus"].set(summary.reserved)
            self._metrics["dra_cpu_resource_claims_active"].set(summary.active_claims)
        if previous is None or previous.pool_generation != state.pool_generation:
            if state.shared_on_isolated and (previous is None or not previous.shared_on_isolated):
                log.warning(
                    "shared pool runs on isolated CPUs: no other CPU is free",
                    shared=state.shared.format(),
                    isolated=state.machine.isolated.format(),
                )
            elif (
                previous is not None
                and previous.shared_on_isolated
                and not state.shared_on_isolated
            ):
                log.info(0, "shared pool left the isolated CPUs", shared=state.shared.format())
            view = pool_view(state)
            for queue in self._watchers:
                queue.put_nowait(view)

    async def _serialized(self, work: Coroutine[Any, Any, T]) -> T:
        """Run a mutation to its end even when the caller goes away (a client timeout cancels
        the handler): files written must be published, and the lock held until then."""
        task = asyncio.ensure_future(work)
        task.add_done_callback(_retrieve)
        return await asyncio.shield(task)

    async def _io(self, func: Callable[..., T], *args: Any) -> T:
        return await asyncio.to_thread(func, *args)

    async def prepare(self, request: claims.PrepareInput) -> claims.PrepareOutcome:
        """Prepares that arrive while others are being written wait and then go together: CPUs
        chosen one after another in memory, all their files written at once, one publish. Each
        is acknowledged only once its own files are durable, and a failed one is taken out of
        the batch without touching the others."""
        cdi.check_uid(request.uid)
        answer: asyncio.Future[claims.PrepareOutcome] = asyncio.get_running_loop().create_future()
        answer.add_done_callback(_retrieve)
        self._waiting.append((request, answer))
        if self._batches is None or self._batches.done():
            # Runs to its end even when every caller goes away (a client timeout cancels the
            # handler): files written must be published, and the lock held until then.
            self._batches = asyncio.ensure_future(self._prepare_batches())
            self._batches.add_done_callback(_retrieve)
        return await asyncio.shield(answer)

    async def _prepare_batches(self) -> None:
        while self._waiting:
            async with self._lock:
                batch, self._waiting = self._waiting, []
                try:
                    await self._prepare_batch(batch)
                except BaseException as exc:
                    for _, answer in batch:
                        if not answer.done():
                            answer.set_exception(exc)
                    raise

    async def _prepare_batch(
        self, batch: list[tuple[claims.PrepareInput, asyncio.Future[claims.PrepareOutcome]]]
    ) -> None:
        published = self.state
        state = published
        accepted: list[tuple[claims.PrepareOutcome, asyncio.Future[claims.PrepareOutcome]]] = []
        for request, answer in batch:
            try:
                outcome = claims.prepare(state, request, self._clock())
            except Exception as exc:
                if isinstance(exc, ConflictError | InsufficientCPUsError):
                    # The scheduler allocated what this node cannot give: worth a warning.
                    log.warning(
                        "claim refused",
                        claim=request.uid,
                        namespace=request.namespace,
                        name=request.name,
                        error=str(exc),
                    )
                answer.set_exception(exc)
                continue
            state = outcome.state
            accepted.append((outcome, answer))
        uids = sorted({outcome.record.uid for outcome, _ in accepted})
        results = await asyncio.gather(
            *(self._write_prepared(state.records[uid], published.records.get(uid)) for uid in uids),
            return_exceptions=True,
        )
        failed: dict[str, BaseException] = {}
        for uid, result in zip(uids, results, strict=True):
            if isinstance(result, BaseException):
                failed[uid] = result
                before = published.records.get(uid)
                if before is None:
                    state, _ = claims.unprepare(state, uid)
                else:
                    restored = dict(state.records)
                    restored[uid] = before
                    state = state.with_records(restored, pool_changed=False)
        if len(failed) == len(uids):
            state = published  # nothing of this batch is on disk: nothing changes
        if state is not published:
            self._publish(state)
        for outcome, answer in accepted:
            record = outcome.record
            if record.uid in failed:
                answer.set_exception(failed[record.uid])
                continue
            if outcome.confirmed:
                log.warning(
                    "quarantined claim confirmed by its prepare",
                    claim=record.uid,
                    cpus=record.cpus.format(),
                    container=record.container_id,
                )
            if outcome.already_prepared:
                log.info(2, "claim already prepared", claim=record.uid, cpus=record.cpus.format())
            else:
                if self._metrics:
                    self._metrics["dra_cpu_claim_allocated_cpus"].observe(len(record.cpus))
                log.info(
                    2,
                    "claim prepared",
                    claim=record.uid,
                    namespace=record.namespace,
                    name=record.name,
                    cpus=record.cpus.format(),
                    policy=record.policy,
                )
            answer.set_result(outcome)

    async def _undo_spec(self, uid: str) -> None:
        try:
            await self._io(cdi.remove_spec, self.cdi_dir, uid)
        except StateError as exc:
            log.error("cannot roll back CDI spec", claim=uid, error=str(exc))

    async def unprepare(self, uid: str) -> claims.ClaimRecord | None:
        """Unprepares that arrive while others are being removed wait and then go together
        (a node drained at once unprepares thousands): their files removed at once, one
        publish. Each is answered once its own files are gone; a failed one keeps its claim
        without touching the others."""
        answer: asyncio.Future[claims.ClaimRecord | None]
        answer = asyncio.get_running_loop().create_future()
        answer.add_done_callback(_retrieve)
        self._leaving.append((uid, answer))
        if self._unprepares is None or self._unprepares.done():
            # Runs to its end even when every caller goes away (a client timeout cancels the
            # handler): files removed must be published, and the lock held until then.
            self._unprepares = asyncio.ensure_future(self._unprepare_batches())
            self._unprepares.add_done_callback(_retrieve)
        return await asyncio.shield(answer)

    async def _unprepare_batches(self) -> None:
        while self._leaving:
            async with self._lock:
                batch, self._leaving = self._leaving, []
                try:
                    await self._unprepare_batch(batch)
                except BaseException as exc:
                    for _, answer in batch:
                        if not answer.done():
                            answer.set_exception(exc)
                    raise

    async def _unprepare_batch(
        self, batch: list[tuple[str, asyncio.Future[claims.ClaimRecord | None]]]
    ) -> None:
        published = self.state
        uids = sorted({uid for uid, _ in batch})
        removed = await asyncio.gather(
            *(self._remove_claim_files(uid, published.records.get(uid)) for uid in uids),
            return_exceptions=True,
        )
        state = published
        answers: dict[str, claims.ClaimRecord | BaseException | None] = {}
        for uid, result in zip(uids, removed, strict=True):
            if isinstance(result, BaseException):
                answers[uid] = result
                continue
            state, record = claims.unprepare(state, uid)
            answers[uid] = record
        if state is not published:
            self._publish(state)
        for uid in uids:
            gone = answers[uid]
            if gone is None or isinstance(gone, BaseException):
                continue
            if uid in state.draining:
                log.warning(
                    "claim unprepared while its container runs; its CPUs stay out of the "
                    "shared pool until the container stops",
                    claim=uid,
                    container=gone.container_id,
                    cpus=gone.cpus.format(),
                )
                answers[uid] = replace(gone, cpus=CPUSet())
            else:
                log.info(2, "claim unprepared", claim=uid, released=gone.cpus.format())
        for uid, answer in batch:
            outcome = answers[uid]
            if isinstance(outcome, BaseException):
                answer.set_exception(outcome)
            else:
                answer.set_result(outcome)

    async def _remove_claim_files(self, uid: str, record: claims.ClaimRecord | None) -> None:
        """The claim's CDI spec and record; when the record cannot be removed the spec is put
        back, so disk and memory agree again and the claim stays prepared."""
        if record is None:
            # Nothing recorded; a stray spec of this claim must not outlive it.
            removed = await self._io(cdi.remove_spec, self.cdi_dir, uid)
            log.info(2, "claim was not prepared", claim=uid, removed_stray_spec=removed)
            return
        await self._io(cdi.remove_spec, self.cdi_dir, uid)
        try:
            await self._io(records.remove_record, self.state_dir, uid)
        except Exception:
            try:
                await self._io(cdi.write_spec, self.cdi_dir, uid, record.cpus)
            except StateError as exc:
                log.error("cannot restore CDI spec", claim=uid, error=str(exc))
            raise

    async def attach(
        self, container: claims.Container, presented: Mapping[str, CPUSet]
    ) -> claims.AttachOutcome:
        return await self._serialized(self._attach(container, presented))

    async def _attach(
        self, container: claims.Container, presented: Mapping[str, CPUSet]
    ) -> claims.AttachOutcome:
        async with self._lock:
            state = self.state
            outcome = claims.attach(state, container, presented)
            for uid in sorted(presented):
                before = state.records[uid]
                if before.owner is None and not before.pods_known:
                    log.warning(
                        "claim prepared without its reservedFor pods (an older dra-plugin); "
                        "its first container becomes the owner",
                        claim=uid,
                        owner=container.owner.describe(),
                    )
            if outcome.changed:
                await self._io(self._write_records, state, outcome.state, sorted(presented))
                self._publish(outcome.state)
            log.info(
                2,
                "container attached",
                container=container.container_id,
                owner=container.owner.describe(),
                claims=",".join(sorted(presented)),
                cpus=outcome.cpus.format(),
            )
            return outcome

    async def detach(self, container_id: str) -> list[str]:
        return await self._serialized(self._detach(container_id))

    async def _detach(self, container_id: str) -> list[str]:
        async with self._lock:
            state = self.state
            new_state, uids = claims.detach(state, container_id)
            if new_state is not state:
                await self._io(self._write_records, state, new_state, uids)
                self._publish(new_state)
            if uids:
                log.info(2, "container detached", container=container_id, claims=",".join(uids))
            return uids

    async def reconcile(self, live: set[str]) -> list[str]:
        """Detach every container held as running that the runtime no longer runs; returns
        their ids."""
        gone = sorted(claims.running_containers(self.state) - live)
        for container_id in gone:
            await self.detach(container_id)
        if gone:
            log.warning(
                "containers the runtime no longer runs were detached (their stop was missed)",
                containers=",".join(gone[:20]),
                count=len(gone),
            )
        return gone

    async def adopt(
        self, container: claims.Container, presented: Mapping[str, CPUSet]
    ) -> claims.AdoptOutcome:
        return await self._serialized(self._adopt(container, presented))

    async def _adopt(
        self, container: claims.Container, presented: Mapping[str, CPUSet]
    ) -> claims.AdoptOutcome:
        async with self._lock:
            state = self.state
            outcome = claims.adopt(state, container, presented, self._clock())
            if outcome.changed:
                await self._io(self._write_records, state, outcome.state, sorted(presented))
            if outcome.state is not state:
                self._publish(outcome.state)
            for result in outcome.results:
                if result.quarantined:
                    log.warning(
                        "running container presents a claim this node has no record of; "
                        "quarantined, no CPUs taken",
                        claim=result.uid,
                        container=container.container_id,
                        owner=container.owner.describe(),
                    )
                elif not result.accepted:
                    log.warning(
                        "running container's claim refused", claim=result.uid, error=result.error
                    )
            return outcome

    async def update_topology(self, machine: Machine) -> bool:
        return await self._serialized(self._update_topology(machine))

    async def _update_topology(self, machine: Machine) -> bool:
        """A new inventory: rebuild the devices; True if they changed."""
        async with self._lock:
            state = self.state
            if self._topology_error:
                self._topology_error = ""
                log.info(0, "topology readable again")
                if machine.fingerprint == state.machine.fingerprint:
                    self._assess_health(state)
            if machine.fingerprint == state.machine.fingerprint:
                return False
            devices = build_devices(machine, self.options)
            before = self._devices_generation
            new_state = claims.retopologize(state, machine, devices)
            self._published_devices(new_state)  # moves the generation if they changed
            changed = self._devices_generation != before
            for record, offline in claims.offline_claims(new_state):
                log.warning(
                    "claim holds CPUs that went offline; keeping the record",
                    claim=record.uid,
                    offline=offline.format(),
                )
            await self._io(records.write_node, self.state_dir, self._node_file(new_state))
            self._publish(new_state)
            self._assess_health(new_state)
            log.info(
                0,
                "topology changed",
                online=machine.online.format(),
                devices_changed=changed,
                devices_generation=self._devices_generation,
            )
            return changed

    # ---- shared pool watchers -------------------------------------------------------------------

    def subscribe(self) -> asyncio.Queue[SharedPoolView]:
        queue: asyncio.Queue[SharedPoolView] = asyncio.Queue()
        self._watchers.add(queue)
        return queue

    def unsubscribe(self, queue: asyncio.Queue[SharedPoolView]) -> None:
        self._watchers.discard(queue)
