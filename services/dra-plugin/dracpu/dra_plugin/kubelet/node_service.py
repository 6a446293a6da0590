"""NodePrepareResources / NodeUnprepareResources, once for both kubelet API versions.

Each claim of a batch gets its own outcome: a claim that cannot be read, was replaced, is not
allocated, asks for something we refuse, or that the allocator rejects, fails alone. The
ResourceClaims are read, and turned into the allocator's requests, before any lock is taken (as
the upstream helper reads them); calls for the same claim are serialized, different claims
proceed concurrently (the allocator serializes its own mutations). What each prepared claim
got, or why it failed, goes into its status.devices through the status writer, in the
background (`dracpu.dra_plugin.cluster.status_writer`).

The allocator is waited for as long as the kubelet's deadline for the call allows (a
CallBudget). When it does not answer in that time the whole call fails UNAVAILABLE, as one line
naming the allocator and how long it waited: the kubelet tries the pod again, and every claim's
prepare and unprepare is idempotent.

Each kubelet call is one operation (`dracpu.core.operation`): the one its gRPC server gave it,
or a new one when called otherwise. Its log lines, and the allocator's for the calls it makes,
carry the same `opID`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from dracpu.core import operation
from dracpu.core.clients.allocator import AllocatorClient, AllocatorUnavailableError
from dracpu.core.driver import ATTR_ALLOCATED_NUM_CPUS
from dracpu.core.errors import DracpuError, InvalidInputError, NotFoundError
from dracpu.core.log import get_logger
from dracpu.dra_plugin.cluster.objects import Cluster
from dracpu.dra_plugin.cluster.status_writer import ClaimStatusWriter
from dracpu.dra_plugin.common.claim_request import (
    allocated_cpus,
    base_request,
    prepare_request,
    share_ids,
)
from dracpu.dra_plugin.common.intervals import LIST_CLAIMS_DEADLINE
from dracpu.dra_plugin.common.plugin_metrics import PluginMetrics
from dracpu.dra_plugin.common.resource_claim import ClaimRef, ResourceClaim, parse_claim
from dracpu.dra_plugin.kubelet.call_budget import CallBudget
from dracpu.dra_plugin.kubelet.keyed_lock import KeyedLock
from dracpu.dra_plugin.kubelet.metadata import MetadataDevice, MetadataWriter, attribute_json
from dracpu.pb.allocator.v1 import allocator_pb2

log = get_logger(__name__)

MAX_CONCURRENT_CALLS = 64


@dataclass
class PreparedDevice:
    """One entry of the kubelet's Device list, independent of the API version."""

    request_names: list[str]
    pool_name: str
    device_name: str
    cdi_device_ids: list[str] = field(default_factory=list)
    share_id: str | None = None  # only the v1 API can carry it


@dataclass
class PrepareOutcome:
    devices: list[PreparedDevice] = field(default_factory=list)
    error: str = ""
    unavailable: AllocatorUnavailableError | None = None


def _raise_unavailable(failures: Sequence[AllocatorUnavailableError | None]) -> None:
    """The whole call fails when the allocator could not answer one of its claims in time."""
    missed = [f for f in failures if f is not None]
    if missed:
        others = f" ({len(missed) - 1} more claims of this call alike)" if len(missed) > 1 else ""
        raise AllocatorUnavailableError(f"{missed[0]}{others}")


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, DracpuError):
        return str(exc)
    return f"internal error: {type(exc).__name__}: {exc}"


T = TypeVar("T")


async def beside(call: Awaitable[T], work: Callable[[], None]) -> T:
    """`call` awaited while `work` runs in a thread: the caller waits for the slower of the
    two, not for their sum (an unprepare's device metadata removed while the allocator removes
    its files; the kubelet starts no container of a claim it unprepares, and retries a failed
    one, so the metadata may go first). `call`'s error first, then `work`'s."""
    side = asyncio.create_task(asyncio.to_thread(work))
    try:
        result = await call
    finally:
        await asyncio.wait([side])
    failed = side.exception()
    if failed is not None:
        raise failed
    return result


class NodeService:
    def __init__(
        self,
        *,
        driver: str,
        cluster: Cluster,
        allocator: AllocatorClient,
        metadata: MetadataWriter,
        metrics: PluginMetrics,
        status: ClaimStatusWriter | None = None,
    ) -> None:
        self.driver = driver
        self.status = status
        self.cluster = cluster
        self.allocator = allocator
        self.metadata = metadata
        self.metrics = metrics
        self._locks = KeyedLock()
        # A batch of thousands of claims goes to the allocator (and the API server) a bounded
        # number at a time, rather than as thousands of concurrent calls.
        self._calls = asyncio.Semaphore(MAX_CONCURRENT_CALLS)

    async def _get_claim(self, ref: ClaimRef) -> ResourceClaim:
        """The claim, read and parsed once: everything after reads the typed model."""
        ref.check()
        async with self._calls:
            obj = await self.cluster.get_claim(ref.namespace, ref.name)
        return parse_claim(obj, self.driver, f"claim {ref}")

    async def prepare(
        self, claims: Sequence[ClaimRef], budget: CallBudget | None = None
    ) -> dict[str, PrepareOutcome]:
        """Each claim's outcome; raises AllocatorUnavailableError when the allocator did not
        answer one of them within `budget` (the allocator client's default when None)."""
        with operation.scope():
            log.info(4, "preparing claims", count=len(claims))
            objects = await asyncio.gather(
                *(self._get_claim(c) for c in claims), return_exceptions=True
            )
            outcomes = await asyncio.gather(
                *(self._prepare_one(c, o, budget) for c, o in zip(claims, objects, strict=True))
            )
        _raise_unavailable([o.unavailable for o in outcomes])
        return {c.uid: o for c, o in zip(claims, outcomes, strict=True)}

    async def _prepare_one(
        self, ref: ClaimRef, claim: ResourceClaim | BaseException, budget: CallBudget | None
    ) -> PrepareOutcome:
        start = time.perf_counter()
        try:
            if isinstance(claim, InvalidInputError):
                raise claim
            if isinstance(claim, BaseException):
                if isinstance(claim, DracpuError) and not str(claim).startswith("retrieve claim"):
                    raise type(claim)(f"retrieve claim {ref}: {claim}")
                raise claim
            # The claim is only read: its request is built before the claim's lock.
            request = prepare_request(ref, claim)
            if request is None:
                log.info(2, "claim has nothing for this driver", claim=str(ref), uid=ref.uid)
                outcome = PrepareOutcome()
            else:
                shares = share_ids(claim)
                async with self._locks.hold(ref.uid), self._calls:
                    outcome = await self._prepare_locked(ref, claim, request, shares, budget)
        except Exception as exc:
            outcome = PrepareOutcome(error=_error_text(exc))
            if isinstance(exc, AllocatorUnavailableError):
                outcome.unavailable = exc
            # A failure is written into the claim only when it is the claim the kubelet meant.
            if (
                self.status is not None
                and isinstance(claim, ResourceClaim)
                and claim.uid == ref.uid
            ):
                self.status.failed(ref, claim, outcome.error)
            if not isinstance(exc, DracpuError):
                log.error("unexpected prepare failure", claim=str(ref), exc_info=True)
            log.warning("claim not prepared", claim=str(ref), uid=ref.uid, error=outcome.error)
            self.metrics.prepared("error", time.perf_counter() - start)
            return outcome
        self.metrics.prepared("success", time.perf_counter() - start)
        return outcome

    async def _prepare_locked(
        self,
        ref: ClaimRef,
        claim: ResourceClaim,
        request: allocator_pb2.PrepareRequest,
        shares: dict[tuple[str, str, str], str],
        budget: CallBudget | None,
    ) -> PrepareOutcome:
        if log.enabled(4):  # the fields cost more than the call when the line is off
            log.info(
                4,
                "asking the allocator",
                claim=str(ref),
                results=",".join(f"{r.request}:{r.device}" for r in request.results),
                configs=len(request.configs),
            )
        response = await self.allocator.prepare(request, budget.left() if budget else None)
        if self.status is not None:
            self.status.prepared(ref, claim, response, shares)
        devices = [
            PreparedDevice(
                request_names=[base_request(n) for n in d.request_names],
                pool_name=d.pool_name,
                device_name=d.device_name,
                cdi_device_ids=list(d.cdi_device_ids),
                share_id=next(
                    (
                        shares[(n, d.pool_name, d.device_name)]
                        for n in d.request_names
                        if (n, d.pool_name, d.device_name) in shares
                    ),
                    None,
                ),
            )
            for d in response.devices
        ]
        await _attach_metadata(self.metadata, ref, claim, request, response, devices)
        if log.enabled(2):
            log.info(
                2,
                "claim prepared",
                claim=str(ref),
                uid=ref.uid,
                cpus=response.claim.cpus,
                devices=",".join(d.device_name for d in devices),
                again=response.already_prepared,
            )
        if log.enabled(4):
            for d in response.devices:
                log.info(4, "device prepared", claim=str(ref), device=d.device_name, cpus=d.cpus)
        return PrepareOutcome(devices=devices)

    async def catch_up(self, node: str) -> int:
        """At start: every claim the allocator holds whose status.devices lacks our Ready
        entries (a write that had not landed when the plugin stopped) gets them, from the
        allocator's recorded answer (a repeated Prepare). Only claims still allocated on this
        node's pool, with the same UID, are touched; failures are left for the next prepare.
        Returns how many claims were written again."""
        if self.status is None or not self.status.enabled:
            return 0
        with operation.scope():  # one operation: the catch-up at start
            return await self._catch_up(node)

    async def _catch_up(self, node: str) -> int:
        assert self.status is not None
        records = await self.allocator.list_claims(deadline=LIST_CLAIMS_DEADLINE)
        written = 0
        for record in records.claims:
            ref = ClaimRef(record.namespace, record.name, record.uid)
            try:
                claim = await self._get_claim(ref)
                request = prepare_request(ref, claim)
                if request is None or any(r.pool != node for r in request.results):
                    continue
                if self.status.complete(claim):
                    continue
                async with self._locks.hold(ref.uid), self._calls:
                    # The kubelet may have unprepared it since the list: a Prepare then would
                    # take CPUs again for a claim nobody will ever unprepare. Under the
                    # claim's lock no unprepare of it runs, so one still held stays held.
                    if not await self._still_prepared(ref):
                        continue
                    response = await self.allocator.prepare(request)
            except DracpuError as exc:
                log.info(4, "claim status not caught up", claim=str(ref), uid=ref.uid,
                         reason=str(exc))  # fmt: skip
                continue
            self.status.prepared(ref, claim, response, share_ids(claim))
            written += 1
        if written:
            log.info(2, "claim device status caught up after a restart", claims=written)
        return written

    async def _still_prepared(self, ref: ClaimRef) -> bool:
        try:
            await self.allocator.claim(ref.uid)
        except NotFoundError:
            log.info(4, "claim unprepared before its status was caught up", claim=str(ref),
                     uid=ref.uid)  # fmt: skip
            return False
        return True

    async def unprepare(
        self, claims: Sequence[ClaimRef], budget: CallBudget | None = None
    ) -> dict[str, str]:
        """Claim UID -> error ("" when released); raises AllocatorUnavailableError as prepare
        does."""
        with operation.scope():
            log.info(4, "unpreparing claims", count=len(claims))
            outcomes = await asyncio.gather(*(self._unprepare_one(c, budget) for c in claims))
        _raise_unavailable([missed for _, missed in outcomes])
        return {c.uid: error for c, (error, _) in zip(claims, outcomes, strict=True)}

    async def _unprepare_one(
        self, ref: ClaimRef, budget: CallBudget | None
    ) -> tuple[str, AllocatorUnavailableError | None]:
        """The claim's error ("" when released), and the allocator's silence if that was it."""
        try:
            ref.check()
            async with self._locks.hold(ref.uid), self._calls:
                response = await beside(
                    self.allocator.unprepare(ref.uid, budget.left() if budget else None),
                    lambda: self.metadata.remove(ref),
                )
                if self.status is not None:
                    self.status.removed(ref)
        except Exception as exc:
            error = _error_text(exc)
            if not isinstance(exc, DracpuError):
                log.error("unexpected unprepare failure", claim=str(ref), exc_info=True)
            log.warning("claim not unprepared", claim=str(ref), uid=ref.uid, error=error)
            self.metrics.unprepared("error")
            return error, exc if isinstance(exc, AllocatorUnavailableError) else None
        log.info(
            2,
            "claim unprepared",
            claim=str(ref),
            uid=ref.uid,
            was_prepared=response.was_prepared,
            released=response.released_cpus,
        )
        self.metrics.unprepared("success")
        return "", None


async def _attach_metadata(
    metadata: MetadataWriter,
    ref: ClaimRef,
    claim: ResourceClaim,
    request: allocator_pb2.PrepareRequest,
    response: allocator_pb2.PrepareResponse,
    devices: list[PreparedDevice],
) -> None:
    """The claim's device metadata written for the kubelet to hand its containers, one file
    per request, and each request's metadata CDI device added to its first prepared device."""
    counts = allocated_cpus(request)
    if not any(prepared.request_names for prepared in response.devices):
        return  # no request to describe
    pod_claim = claim.pod_claim_name
    by_request: dict[str, list[MetadataDevice]] = {}
    for prepared in response.devices:
        attributes = {k: attribute_json(v) for k, v in prepared.attributes.items()}
        for name in prepared.request_names:
            count = counts.get((name, prepared.device_name))
            attrs = dict(attributes)
            if count is not None:  # the allocator may already carry it
                attrs.setdefault(ATTR_ALLOCATED_NUM_CPUS, {"int": count})
            by_request.setdefault(name, []).append(
                MetadataDevice(pool=prepared.pool_name, name=prepared.device_name, attributes=attrs)
            )
    ids = await metadata.write_off_loop(ref, pod_claim, by_request)
    injected: set[str] = set()
    for device in devices:
        for name in device.request_names:
            if name in ids and name not in injected:
                device.cdi_device_ids.append(ids[name])
                injected.add(name)
