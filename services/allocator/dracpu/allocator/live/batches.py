"""Prepare and unprepare on the live state, each made durable (CDI spec, claim record) before it
is published or acknowledged, and taken together when they arrive while others are written.

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

A batch runs as no operation of its own (`dracpu.core.operation`): what it logs about one
request carries that request's `opID`, whichever request started the batch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import replace
from typing import TypeVar

from dracpu.allocator import claims
from dracpu.allocator.live.state import LiveState
from dracpu.allocator.store import cdi, durable, records
from dracpu.core import operation
from dracpu.core.cpuset import CPUSet
from dracpu.core.errors import ConflictError, InsufficientCPUsError, StateError
from dracpu.core.log import get_logger
from dracpu.core.tasks import io, retrieve

log = get_logger(__name__)
T = TypeVar("T")

Prepared = asyncio.Future[claims.PrepareOutcome]
Unprepared = asyncio.Future[claims.ClaimRecord | None]
# A request waiting for its batch: what it asks, its answer, the operation it belongs to.
WaitingPrepare = tuple[claims.PrepareInput, Prepared, str | None]
WaitingUnprepare = tuple[str, Unprepared, str | None]


async def _as_operation(op_id: str | None, work: Awaitable[T]) -> T:
    with operation.bound(op_id):
        return await work


class PrepareBatches:
    def __init__(self, live: LiveState) -> None:
        self._live = live
        self._waiting: list[WaitingPrepare] = []
        self._batches: asyncio.Task[None] | None = None

    async def prepare(self, request: claims.PrepareInput) -> claims.PrepareOutcome:
        """Prepares that arrive while others are being written wait and then go together: CPUs
        chosen one after another in memory, all their files written at once, one publish. Each
        is acknowledged only once its own files are durable, and a failed one is taken out of
        the batch without touching the others."""
        cdi.check_uid(request.uid)
        answer: Prepared = asyncio.get_running_loop().create_future()
        answer.add_done_callback(retrieve)
        self._waiting.append((request, answer, operation.current()))
        if self._batches is None or self._batches.done():
            # Runs to its end even when every caller goes away (a client timeout cancels the
            # handler): files written must be published, and the lock held until then.
            self._batches = asyncio.ensure_future(self._prepare_batches())
            self._batches.add_done_callback(retrieve)
        return await asyncio.shield(answer)

    async def _prepare_batches(self) -> None:
        with operation.bound(None):  # not the operation of the request that started it
            while self._waiting:
                async with self._live.lock:
                    batch, self._waiting = self._waiting, []
                    try:
                        await self._prepare_batch(batch)
                    except BaseException as exc:
                        for _, answer, _ in batch:
                            if not answer.done():
                                answer.set_exception(exc)
                        raise

    async def _prepare_batch(self, batch: list[WaitingPrepare]) -> None:
        published = self._live.current or self._live.state  # the latter raises: starting
        state = published
        accepted: list[tuple[claims.PrepareOutcome, Prepared, str | None]] = []
        for request, answer, op_id in batch:
            try:
                outcome = claims.prepare(state, request, self._live.clock())
            except Exception as exc:
                if isinstance(exc, ConflictError | InsufficientCPUsError):
                    # The scheduler allocated what this node cannot give: worth a warning.
                    with operation.bound(op_id):
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
            accepted.append((outcome, answer, op_id))
        ops = {outcome.record.uid: op_id for outcome, _, op_id in accepted}
        uids = sorted(ops)
        results = await asyncio.gather(
            *(
                _as_operation(
                    ops[uid], self._write_prepared(state.records[uid], published.records.get(uid))
                )
                for uid in uids
            ),
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
            self._live.publish(state)
        for outcome, answer, op_id in accepted:
            if outcome.record.uid in failed:
                answer.set_exception(failed[outcome.record.uid])
                continue
            with operation.bound(op_id):
                self._log_prepared(outcome)
            answer.set_result(outcome)

    def _log_prepared(self, outcome: claims.PrepareOutcome) -> None:
        record = outcome.record
        if outcome.confirmed:
            log.warning(
                "quarantined claim confirmed by its prepare",
                claim=record.uid,
                cpus=record.cpus.format(),
                container=record.container_id,
            )
        if outcome.already_prepared:
            log.info(2, "claim already prepared", claim=record.uid, cpus=record.cpus.format())
            return
        if self._live.metrics:
            self._live.metrics["dra_cpu_claim_allocated_cpus"].observe(len(record.cpus))
        log.info(
            2,
            "claim prepared",
            claim=record.uid,
            namespace=record.namespace,
            name=record.name,
            cpus=record.cpus.format(),
            policy=record.policy,
        )

    async def _write_prepared(
        self, record: claims.ClaimRecord, before: claims.ClaimRecord | None
    ) -> None:
        """A prepared claim's spec and record (only the record synced; start-up recovery
        completes either one found alone). The spec is written again even
        for a claim already prepared (it may have been lost, e.g. /var/run wiped); the record
        only when it changed. A failure puts back what this wrote."""
        live = self._live
        files = [cdi.spec_file(live.cdi_dir, record.uid, record.cpus)]
        if record is not before:
            files.append(records.record_file(live.state_dir, record))
        written = await io(durable.write_files, files)
        errors = [error for error in written if error is not None]
        if not errors:
            return
        if before is None and written[0] is None:
            await self._undo_spec(record.uid)
        if len(written) > 1 and written[1] is None:
            try:
                if before is None:
                    await io(records.remove_record, live.state_dir, record.uid)
                else:
                    await io(records.write_record, live.state_dir, before)
            except StateError as exc:
                log.error("cannot roll back claim record", claim=record.uid, error=str(exc))
        raise errors[0]

    async def _undo_spec(self, uid: str) -> None:
        try:
            await io(cdi.remove_spec, self._live.cdi_dir, uid)
        except StateError as exc:
            log.error("cannot roll back CDI spec", claim=uid, error=str(exc))


class UnprepareBatches:
    def __init__(self, live: LiveState) -> None:
        self._live = live
        self._leaving: list[WaitingUnprepare] = []
        self._unprepares: asyncio.Task[None] | None = None

    async def unprepare(self, uid: str) -> claims.ClaimRecord | None:
        """Unprepares that arrive while others are being removed wait and then go together
        (a node drained at once unprepares thousands): their files removed at once, one
        publish. Each is answered once its own files are gone; a failed one keeps its claim
        without touching the others."""
        answer: Unprepared = asyncio.get_running_loop().create_future()
        answer.add_done_callback(retrieve)
        self._leaving.append((uid, answer, operation.current()))
        if self._unprepares is None or self._unprepares.done():
            # Runs to its end even when every caller goes away (a client timeout cancels the
            # handler): files removed must be published, and the lock held until then.
            self._unprepares = asyncio.ensure_future(self._unprepare_batches())
            self._unprepares.add_done_callback(retrieve)
        return await asyncio.shield(answer)

    async def _unprepare_batches(self) -> None:
        with operation.bound(None):  # not the operation of the request that started it
            while self._leaving:
                async with self._live.lock:
                    batch, self._leaving = self._leaving, []
                    try:
                        await self._unprepare_batch(batch)
                    except BaseException as exc:
                        for _, answer, _ in batch:
                            if not answer.done():
                                answer.set_exception(exc)
                        raise

    async def _unprepare_batch(self, batch: list[WaitingUnprepare]) -> None:
        published = self._live.current or self._live.state  # the latter raises: starting
        ops: dict[str, str | None] = {}
        for uid, _, op_id in batch:
            ops.setdefault(uid, op_id)  # a claim asked twice: the first asker's
        uids = sorted(ops)
        removed = await asyncio.gather(
            *(
                _as_operation(ops[uid], self._remove_claim_files(uid, published.records.get(uid)))
                for uid in uids
            ),
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
            self._live.publish(state)
        for uid in uids:
            gone = answers[uid]
            if gone is None or isinstance(gone, BaseException):
                continue
            with operation.bound(ops[uid]):
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
        for uid, answer, _ in batch:
            outcome = answers[uid]
            if isinstance(outcome, BaseException):
                answer.set_exception(outcome)
            else:
                answer.set_result(outcome)

    async def _remove_claim_files(self, uid: str, record: claims.ClaimRecord | None) -> None:
        """The claim's CDI spec and record; when the record cannot be removed the spec is put
        back, so disk and memory agree again and the claim stays prepared."""
        live = self._live
        if record is None:
            # Nothing recorded; a stray spec of this claim must not outlive it.
            removed = await io(cdi.remove_spec, live.cdi_dir, uid)
            log.info(2, "claim was not prepared", claim=uid, removed_stray_spec=removed)
            return
        await io(cdi.remove_spec, live.cdi_dir, uid)
        try:
            await io(records.remove_record, live.state_dir, uid)
        except Exception:
            try:
                await io(cdi.write_spec, live.cdi_dir, uid, record.cpus)
            except StateError as exc:
                log.error("cannot restore CDI spec", claim=uid, error=str(exc))
            raise
