"""Events on the driver's own pod, so `kubectl describe pod` and `kubectl get events` say which
prerequisite is missing and how to turn it on.

The dra-plugin is the one container of the pod with API access: it writes its own verdicts
and those the nri-plugin reports. The pod is named by the downward API (POD_NAME,
POD_NAMESPACE, POD_UID, set by the chart); without them (a development run) no Event is
written. A missing prerequisite is written once per message (a Warning, reason
PrerequisiteMissing), its coming back once (Normal, PrerequisiteMet). An Event the server
refuses is logged with the server's reason and not retried: the log line and /v1/health say
the same.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from dracpu.core.driver import DRIVER_NAME
from dracpu.core.errors import DracpuError
from dracpu.core.log import get_logger
from dracpu.core.prerequisites import Prerequisite
from dracpu.dra_plugin.cluster.objects import Object

log = get_logger(__name__)

MISSING = "PrerequisiteMissing"
MET = "PrerequisiteMet"
MAX_MESSAGE = 1024  # what events.k8s.io keeps of a note


@dataclass(frozen=True)
class PodIdentity:
    name: str
    namespace: str
    uid: str = ""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> PodIdentity | None:
        env = os.environ if environ is None else environ
        name, namespace = env.get("POD_NAME", ""), env.get("POD_NAMESPACE", "")
        if not name or not namespace:
            return None
        return cls(name, namespace, env.get("POD_UID", ""))


class EventSink(Protocol):
    async def create_event(self, namespace: str, event: Mapping[str, Any]) -> Object: ...


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def event_document(pod: PodIdentity, node: str, reason: str, message: str) -> dict[str, Any]:
    """A core/v1 Event about `pod`, named as client-go names one (object name, hex time)."""
    involved = {"apiVersion": "v1", "kind": "Pod", "name": pod.name, "namespace": pod.namespace}
    if pod.uid:
        involved["uid"] = pod.uid  # kubectl describe matches a pod's events by its UID too
    now = _now()
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{pod.name}.{time.time_ns():x}", "namespace": pod.namespace},
        "involvedObject": involved,
        "reason": reason,
        "message": message[:MAX_MESSAGE],
        "type": "Normal" if reason == MET else "Warning",
        "source": {"component": DRIVER_NAME, "host": node},
        "reportingComponent": DRIVER_NAME,
        "reportingInstance": node,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }


class PodEvents:
    """Turns prerequisite verdicts into Events on the pod, each change once."""

    def __init__(self, api: EventSink | None, pod: PodIdentity | None, node: str) -> None:
        self.api = api
        self.pod = pod
        self.node = node
        self.written = 0
        self.last_error = ""
        self._reported: dict[tuple[str, str], tuple[bool, str]] = {}
        self._queue: asyncio.Queue[tuple[str, str]] = asyncio.Queue()

    @property
    def writable(self) -> bool:
        """Whether Events can be written: an API server and a pod to write them about."""
        return self.api is not None and self.pod is not None

    def report(self, service: str, verdict: Prerequisite) -> None:
        """Queue an Event for `verdict` of `service` when it is news: a missing prerequisite
        not reported with these words, or one reported missing that is now met."""
        key = (service, verdict.name)
        known = self._reported.get(key)
        if known == (verdict.ok, verdict.message):
            return
        if verdict.ok and (known is None or known[0]):
            self._reported[key] = (True, verdict.message)
            return
        self._reported[key] = (verdict.ok, verdict.message)
        reason = MET if verdict.ok else MISSING
        self._queue.put_nowait((reason, f"{service}: {verdict.name}: {verdict.message}"))

    async def run(self) -> None:
        """Write the queued Events, one at a time, until cancelled."""
        if not self.writable:
            log.info(2, "no pod named by POD_NAME and POD_NAMESPACE; prerequisites are not "
                     "written as Events")  # fmt: skip
        while True:
            reason, message = await self._queue.get()
            await self.write(reason, message)

    async def write(self, reason: str, message: str) -> None:
        if self.api is None or self.pod is None:
            return
        event = event_document(self.pod, self.node, reason, message)
        try:
            await self.api.create_event(self.pod.namespace, event)
        except DracpuError as exc:
            self.last_error = str(exc)
            log.warning("event on the driver's pod not written", event_reason=reason,
                        pod=f"{self.pod.namespace}/{self.pod.name}", reason=str(exc))  # fmt: skip
            return
        self.written += 1
        log.info(4, "event written on the driver's pod", event_reason=reason)
