"""What the driver needs of its cluster and node, and whether each is there.

A prerequisite is a named verdict: the API server serves resource.k8s.io/v1, it keeps the fields
the devices use (DRAConsumableCapacity), it keeps device taints (DRADeviceTaints: without them
the driver publishes untainted, and that is all), the runtime speaks NRI, the runtime injects
CDI devices. A service records each verdict when it learns it; a missing one is logged as one
line naming what is missing and how to turn it on, and so is its coming back. The services
report them in their status (the api's `/v1/health`) and the dra-plugin writes them as Events on
the driver's pod.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from dracpu.core.changes import Changes
from dracpu.core.log import get_logger
from dracpu.pb.common.v1 import prerequisite_pb2

log = get_logger(__name__)

# The names, as the status and the Events spell them.
RESOURCE_API = "resource.k8s.io/v1"
CONSUMABLE_CAPACITY = "DRAConsumableCapacity"
DEVICE_TAINTS = "DRADeviceTaints"
NRI = "NRI"
CDI = "CDI"
# The kubelet's settings whose policies place containers themselves (the dra-plugin reads them).
CPU_MANAGER = "cpuManagerPolicy"
MEMORY_MANAGER = "memoryManagerPolicy"


@dataclass(frozen=True)
class Prerequisite:
    name: str
    ok: bool
    message: str  # one line: what is missing and how to turn it on; when ok, what was found
    checked_at: float

    def to_proto(self) -> prerequisite_pb2.Prerequisite:
        return prerequisite_pb2.Prerequisite(
            name=self.name, ok=self.ok, message=self.message,
            checked_at_unix=int(self.checked_at),
        )  # fmt: skip

    @classmethod
    def from_proto(cls, message: prerequisite_pb2.Prerequisite) -> Prerequisite:
        return cls(message.name, message.ok, message.message, float(message.checked_at_unix))


class Prerequisites:
    """One service's verdicts by name. A verdict that changes is logged once (a missing one
    as a warning) and handed to `on_change`; the same verdict again is silent."""

    def __init__(self, on_change: Callable[[Prerequisite], None] = lambda p: None) -> None:
        self._verdicts: dict[str, Prerequisite] = {}
        self._on_change = on_change
        self.changes = Changes()  # wakes the WatchPrerequisites streams

    def met(self, name: str, message: str) -> Prerequisite:
        return self._record(name, True, message)

    def missing(self, name: str, message: str) -> Prerequisite:
        return self._record(name, False, message)

    def get(self, name: str) -> Prerequisite | None:
        return self._verdicts.get(name)

    def all(self) -> list[Prerequisite]:
        return sorted(self._verdicts.values(), key=lambda p: p.name)

    def protos(self) -> Iterable[prerequisite_pb2.Prerequisite]:
        return [p.to_proto() for p in self.all()]

    def _record(self, name: str, ok: bool, message: str) -> Prerequisite:
        known = self._verdicts.get(name)
        verdict = Prerequisite(name, ok, message, time.time())
        self._verdicts[name] = verdict
        if known is not None and (known.ok, known.message) == (ok, message):
            return verdict
        if not ok:
            log.warning(f"prerequisite missing: {message}", prerequisite=name)
        elif known is not None and not known.ok:
            log.info(0, f"prerequisite met: {message}", prerequisite=name)
        else:
            log.info(2, f"prerequisite met: {message}", prerequisite=name)
        self._on_change(verdict)
        self.changes.notify()
        return verdict
