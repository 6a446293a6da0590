"""Writes this node's entries of ResourceClaim `status.devices`, in the background.

The prepare path only records what it wants a claim's entries to be (`prepared`, `failed`,
`removed`) and returns: a slow, failing or refusing API server never delays nor fails the
kubelet's call. A worker applies the latest wish per claim with server-side apply on the
status subresource under a field manager of our own (`dra.cpu/<node>`), so the server merges
the list-map `status.devices` by its keys (driver, pool, device, shareID) and only the entries
this manager applied are ours: the scheduler's writes and other drivers' entries are left
alone, and applying no entries removes ours. The claim's UID goes along as a precondition, so
a claim deleted and created again under the same name is never written.

Failures are retried with backoff (1 s doubling to 60 s) and logged with the server's reason
when it changes. A server that lacks the field (no status.devices in its schema, the route
unknown, or the field dropped because its DRAResourceClaimDeviceStatus gate is off) is
recorded once as a missing API feature (`cluster.api_features`), and nothing more is
written for the life of the process.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from dracpu.core.errors import ConflictError, DracpuError, InvalidInputError, NotFoundError
from dracpu.core.log import get_logger
from dracpu.core.retry import Backoff
from dracpu.dra_plugin.cluster.api_features import CLAIM_DEVICE_STATUS, FeatureSupport
from dracpu.dra_plugin.cluster.claim_status import READY, failed_entries, prepared_entries
from dracpu.dra_plugin.cluster.objects import Object
from dracpu.dra_plugin.common.plugin_metrics import PluginMetrics
from dracpu.dra_plugin.common.resource_claim import (
    ClaimRef,
    DeviceStatus,
    ResourceClaim,
    parse_claim,
)
from dracpu.dra_plugin.common.waits import wait_set
from dracpu.pb.allocator.v1 import allocator_pb2

log = get_logger(__name__)

FIRST_RETRY = 1.0  # seconds
MAX_BACKOFF = 60.0
CONCURRENCY = 8
MAX_MANAGER = 128  # metav1.ManagedFieldsEntry manager names
# How a server says it does not know the field or the route (k8s.io/apiserver: the
# structured-merge-diff error, and the 404 of an unserved path).
UNKNOWN_FIELD = ("field not declared in schema", "unknown field")
UNKNOWN_ROUTE = "the server could not find the requested resource"


class StatusTarget(Protocol):
    async def apply_claim_status(
        self, namespace: str, name: str, uid: str, manager: str, devices: Sequence[Object]
    ) -> Object:
        """Server-side apply of `status.devices` as `manager` (forced); the stored claim."""
        ...


@dataclass
class _Wish:
    ref: ClaimRef
    entries: list[DeviceStatus]  # [] removes ours
    backoff: Backoff
    due: float = 0.0
    last_error: str = ""


@dataclass
class WriterState:
    written: int = 0
    last_error: str = ""
    last_error_at: float = 0.0
    pending: dict[str, _Wish] = field(default_factory=dict)


def field_manager(driver: str, node: str) -> str:
    return f"{driver}/{node}"[:MAX_MANAGER]


class ClaimStatusWriter:
    def __init__(
        self,
        target: StatusTarget,
        *,
        driver: str,
        node: str,
        features: FeatureSupport,
        metrics: PluginMetrics,
        max_backoff: float = MAX_BACKOFF,
    ) -> None:
        self.target = target
        self.driver = driver
        self.manager = field_manager(driver, node)
        self.features = features
        self.metrics = metrics
        self.max_backoff = max_backoff
        self.state = WriterState()
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def enabled(self) -> bool:
        return CLAIM_DEVICE_STATUS.name not in self.features.missing

    # ---- what the prepare path calls: never waits -------------------------------------------

    def prepared(
        self,
        ref: ClaimRef,
        claim: ResourceClaim,
        response: allocator_pb2.PrepareResponse,
        shares: Mapping[tuple[str, str, str], str],
    ) -> None:
        if self.enabled:
            self._want(ref, prepared_entries(self.driver, claim, response, shares))

    def failed(self, ref: ClaimRef, claim: ResourceClaim, error: str) -> None:
        if self.enabled:
            entries = failed_entries(self.driver, claim, error)
            if entries:
                self._want(ref, entries)

    def removed(self, ref: ClaimRef) -> None:
        if self.enabled:
            self._want(ref, [])

    def complete(self, claim: ResourceClaim) -> bool:
        """Every result of ours in the claim's allocation has a Ready=True entry."""
        ready = {
            d.key
            for d in claim.devices
            if any(c.type == READY and c.status == "True" for c in d.conditions)
        }
        return {r.key for r in claim.results if r.driver == self.driver} <= ready

    def _want(self, ref: ClaimRef, entries: list[DeviceStatus]) -> None:
        # A newer wish starts its retries over: it is another write.
        backoff = Backoff(initial=min(FIRST_RETRY, self.max_backoff), maximum=self.max_backoff)
        self.state.pending[ref.uid] = _Wish(ref, entries, backoff)
        self.metrics.claim_status_pending(len(self.state.pending))
        self._idle.clear()
        self._wake.set()

    async def idle(self) -> None:
        """Until nothing is pending (tests)."""
        await self._idle.wait()

    # ---- the worker -------------------------------------------------------------------------

    async def run(self) -> None:
        while True:
            self._wake.clear()
            now = time.monotonic()
            pending = self.state.pending
            due = [w for w in pending.values() if w.due <= now]
            if not due:
                if not pending:
                    self._idle.set()
                later = min((w.due for w in pending.values()), default=None)
                timeout = None if later is None else max(0.0, later - now)
                await wait_set(self._wake, timeout)
                continue
            for start in range(0, len(due), CONCURRENCY):
                await asyncio.gather(*(self._write(w) for w in due[start : start + CONCURRENCY]))
            self.metrics.claim_status_pending(len(self.state.pending))

    def _done(self, wish: _Wish, result: str) -> None:
        if self.state.pending.get(wish.ref.uid) is wish:  # not replaced by a newer wish
            del self.state.pending[wish.ref.uid]
        self.metrics.claim_status_written(result)

    async def _write(self, wish: _Wish) -> None:
        ref = wish.ref
        try:
            stored = await self.target.apply_claim_status(
                ref.namespace, ref.name, ref.uid, self.manager, [e.to_json() for e in wish.entries]
            )
        except DracpuError as exc:
            self._failed(wish, exc)
            return
        if wish.entries and self._dropped(wish.entries, stored):
            self._lacking(
                "the API server dropped status.devices from the stored ResourceClaim "
                f"(is its {CLAIM_DEVICE_STATUS.gate} feature gate off?)"
            )
            return
        self.state.written += 1
        log.info(
            4 if wish.entries else 5,
            "claim device status written" if wish.entries else "claim device status removed",
            claim=str(ref),
            uid=ref.uid,
            devices=len(wish.entries),
        )
        self._done(wish, "success")

    def _failed(self, wish: _Wish, exc: DracpuError) -> None:
        ref, message = wish.ref, str(exc)
        lowered = message.lower()
        if any(word in lowered for word in UNKNOWN_FIELD) or UNKNOWN_ROUTE in lowered:
            self._lacking(message)
            return
        # A replaced claim: the fake and folder answer 409 on the UID precondition, the real
        # server 422 "metadata.uid: ... field is immutable".
        replaced = "uid" in lowered and ("precondition" in lowered or "immutable" in lowered)
        if isinstance(exc, NotFoundError) or (
            isinstance(exc, ConflictError | InvalidInputError) and replaced
        ):
            # Deleted, or replaced by a claim of the same name: nothing of ours to keep.
            log.info(4, "claim gone; its device status is not written", claim=str(ref),
                     uid=ref.uid, reason=message)  # fmt: skip
            self._done(wish, "gone")
            return
        if isinstance(exc, InvalidInputError):
            # The server refuses what we sent (the allocation moved on): retrying cannot help.
            log.warning("the API server refused a claim's device status", claim=str(ref),
                        uid=ref.uid, reason=message)  # fmt: skip
            self._record_error(message)
            self._done(wish, "refused")
            return
        delay = wish.backoff.next_delay()
        wish.due = time.monotonic() + delay
        if message != wish.last_error:
            log.warning("writing a claim's device status failed; retrying", claim=str(ref),
                        uid=ref.uid, reason=message, retry_in=delay)  # fmt: skip
        wish.last_error = message
        self._record_error(message)
        self.metrics.claim_status_written("retry")

    def _record_error(self, message: str) -> None:
        self.state.last_error = message
        self.state.last_error_at = time.time()

    def _dropped(self, sent: Sequence[DeviceStatus], stored: Object) -> bool:
        """Every entry we sent is missing from the stored claim though its allocation still
        has the device: the server discards the field."""
        try:
            claim = parse_claim(stored, self.driver, "stored claim")
        except InvalidInputError:
            return False  # not a claim to judge by
        kept = {d.key for d in claim.devices}
        allocated = {r.key for r in claim.results}
        wanted = [e.key for e in sent]
        return all(k not in kept for k in wanted) and all(k in allocated for k in wanted)

    def _lacking(self, reason: str) -> None:
        self.features.lacking(CLAIM_DEVICE_STATUS, reason)
        for wish in list(self.state.pending.values()):
            self._done(wish, "unsupported")
