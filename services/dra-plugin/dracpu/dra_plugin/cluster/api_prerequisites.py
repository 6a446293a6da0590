"""What the API server must offer before this node's devices are worth publishing.

Two checks, made before the first ResourceSlice is written and again every RECHECK seconds
while one fails:

- resource.k8s.io/v1 is served (discovery of the group). Kubernetes 1.34 and newer serve it
  by default; older servers only have the beta versions this driver does not write.
- When the devices are shared between claims (the grouped modes: `allowMultipleAllocations`
  with a consumable `dra.cpu/cpu` capacity, KEP-5075), the server keeps that field. A server
  whose DRAConsumableCapacity gate is off (off by default before 1.36) drops it on write without
  a word; the scheduler then hands each grouped device whole to one claim, without the CPU
  count the driver's prepare needs, so no claim could use it. A server-side dry run of a
  ResourceSlice carrying the field shows whether it comes back.

One more is checked the same way but never holds publishing back: whether the server keeps
device taints (gate DRADeviceTaints, beta and on by default from 1.36, GA in 1.37; a server
with the gate off, or older than 1.33, drops `taints` on write). Without them the devices the
node cannot give are published untainted (`publishing.taints`), and the verdict says so once.

While one of the first two fails nothing is published: devices that no claim can be allocated
only hide the cause behind pods that stay Pending. A check the server cannot answer
(unreachable, refused for another reason) decides nothing and is made again at the next round;
only a refusal of the dry run itself (RBAC, an admission policy) lets publishing go on, since
the real writes then say the same thing in the publisher's own error.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Protocol

from dracpu.core.driver import CPU_CAPACITY
from dracpu.core.errors import DracpuError, InvalidInputError, UnavailableError
from dracpu.core.log import get_logger
from dracpu.core.prerequisites import (
    CONSUMABLE_CAPACITY,
    DEVICE_TAINTS,
    RESOURCE_API,
    Prerequisites,
)
from dracpu.dra_plugin.cluster.objects import Object

log = get_logger(__name__)

RECHECK = 60.0  # seconds between checks while a prerequisite is missing
GATE_COMPONENTS = "kube-apiserver, kube-scheduler and every kubelet"
PROBE_DEVICE = "prerequisite-check"
FORBIDDEN = ": 403 Forbidden"  # how apiserver.KubernetesAPI words a 403
TAINTS_MISSING = (
    "the API server drops device taints from ResourceSlices: devices with offline or unhealthy "
    "CPUs are published without taints (and a device whose CPUs are all offline is withdrawn "
    "instead); turn on the DRADeviceTaints feature gate (--feature-gates=DRADeviceTaints=true) "
    "on kube-apiserver and kube-scheduler (on by default from Kubernetes 1.36)"
)


class PrerequisiteAPI(Protocol):
    async def group_versions(self, group: str) -> list[str] | None: ...

    async def dry_run_slice(self, obj: dict[str, Any]) -> Object: ...


def probe_slice(driver: str, node: str) -> dict[str, Any]:
    """A ResourceSlice as the publisher writes one, with one shared device."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"generateName": f"{node}-{driver}-{PROBE_DEVICE}-"},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 0, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": PROBE_DEVICE,
                    "capacity": {CPU_CAPACITY: {"value": "1"}},
                    "allowMultipleAllocations": True,
                }
            ],
        },
    }


def probe_tainted_slice(driver: str, node: str) -> dict[str, Any]:
    """A ResourceSlice with one device carrying the driver's offline taint."""
    probe = probe_slice(driver, node)
    probe["spec"]["devices"] = [
        {
            "name": PROBE_DEVICE,
            "taints": [{"key": "dra.cpu/offline", "value": "0", "effect": "NoSchedule"}],
        }
    ]
    return probe


def _kept_taints(stored: Object) -> bool:
    devices: Sequence[Any] = (stored.get("spec") or {}).get("devices") or []
    return any(isinstance(d, dict) and d.get("taints") for d in devices)


def _kept_sharing(stored: Object) -> bool:
    devices: Sequence[Any] = (stored.get("spec") or {}).get("devices") or []
    return any(isinstance(d, dict) and d.get("allowMultipleAllocations") for d in devices)


class APIPrerequisites:
    """The verdicts on the API server, re-checked while one fails; once all hold they stay."""

    def __init__(
        self,
        api: PrerequisiteAPI,
        prerequisites: Prerequisites,
        *,
        driver: str,
        node: str,
        recheck: float = RECHECK,
    ) -> None:
        self.api = api
        self.prerequisites = prerequisites
        self.driver = driver
        self.node = node
        self.recheck = recheck
        self._group_ok = False
        self._sharing_ok = False
        self._next_check = 0.0
        self._taints_known = False
        self._next_taints_check = 0.0

    async def satisfied(self, shared_devices: bool) -> bool:
        """Whether devices (shared between claims when `shared_devices`) may be published;
        asks the server at most every `recheck` seconds while the answer is no."""
        if self._group_ok and (self._sharing_ok or not shared_devices):
            await self._taints_due()
            return True
        now = time.monotonic()
        if now < self._next_check:
            return False
        try:
            if not self._group_ok:
                self._group_ok = await self._check_group()
            if self._group_ok and shared_devices and not self._sharing_ok:
                self._sharing_ok = await self._check_sharing()
        except DracpuError as exc:
            self._next_check = now + self.recheck
            log.warning("the API server's prerequisites not checked; checking again",
                        error=str(exc), retry_in=self.recheck)  # fmt: skip
            return False
        ready = self._group_ok and (self._sharing_ok or not shared_devices)
        if not ready:
            # Only a "no" waits: devices that become shared later (a mode change) are checked
            # at once, not a recheck interval after the last answer about unshared ones.
            self._next_check = now + self.recheck
            return False
        await self._taints_due()
        return True

    @property
    def taints_kept(self) -> bool | None:
        """Whether the server keeps device taints; None until it has answered."""
        verdict = self.prerequisites.get(DEVICE_TAINTS)
        return None if verdict is None else verdict.ok

    async def _taints_due(self) -> None:
        """The taints check, once answered; asked again every `recheck` seconds until then.
        Never a reason to hold publishing back."""
        now = time.monotonic()
        if self._taints_known or now < self._next_taints_check:
            return
        self._next_taints_check = now + self.recheck
        try:
            stored = await self.api.dry_run_slice(probe_tainted_slice(self.driver, self.node))
        except (InvalidInputError, UnavailableError) as exc:
            text = str(exc)
            if "taints" not in text or FORBIDDEN in text:
                log.warning("device taints not checked; checking again", error=text,
                            retry_in=self.recheck)  # fmt: skip
                return
            stored = {}  # refused by name: missing all the same
        except DracpuError as exc:
            log.warning("device taints not checked; checking again", error=str(exc),
                        retry_in=self.recheck)  # fmt: skip
            return
        self._taints_known = True
        if _kept_taints(stored):
            self.prerequisites.met(DEVICE_TAINTS, "the API server keeps device taints")
            return
        self.prerequisites.missing(DEVICE_TAINTS, TAINTS_MISSING)

    def taints_dropped(self) -> None:
        """A real write showed the server drops taints (the check was not answered yet, or
        the server changed since)."""
        self._taints_known = True
        self.prerequisites.missing(DEVICE_TAINTS, TAINTS_MISSING)

    async def _check_group(self) -> bool:
        versions = await self.api.group_versions("resource.k8s.io")
        if versions and "v1" in versions:
            self.prerequisites.met(RESOURCE_API, "the API server serves resource.k8s.io/v1")
            return True
        if versions:
            found = f"serves resource.k8s.io {', '.join(versions)} but not v1"
        else:
            found = "does not serve resource.k8s.io at all"
        self.prerequisites.missing(
            RESOURCE_API,
            f"the API server {found}: Kubernetes 1.34 or newer serves resource.k8s.io/v1 by "
            "default (on an older control plane upgrade it; on a newer one remove "
            "resource.k8s.io/v1=false from kube-apiserver's --runtime-config); no "
            "ResourceSlices are published until then",
        )
        return False

    async def _check_sharing(self) -> bool:
        try:
            stored = await self.api.dry_run_slice(probe_slice(self.driver, self.node))
        except (InvalidInputError, UnavailableError) as exc:
            text = str(exc)
            if "allowMultipleAllocations" in text:
                stored = {}  # refused by name rather than dropped: missing all the same
            elif FORBIDDEN in text:
                # RBAC or an admission policy refused even the dry run: the real writes will
                # be refused the same way and say so; this check decides nothing.
                log.warning("consumable capacity not checked: the dry run was refused; "
                            "publishing regardless", reason=text)  # fmt: skip
                return True
            else:
                raise
        if _kept_sharing(stored):
            self.prerequisites.met(
                CONSUMABLE_CAPACITY,
                "the API server keeps allowMultipleAllocations (consumable capacity)",
            )
            return True
        self.prerequisites.missing(
            CONSUMABLE_CAPACITY,
            "the API server drops allowMultipleAllocations from ResourceSlices, so no claim "
            "could share the grouped CPU devices: turn on the DRAConsumableCapacity feature "
            f"gate (--feature-gates=DRAConsumableCapacity=true) on {GATE_COMPONENTS} "
            "(on by default from Kubernetes 1.36), or use cpuDeviceMode: individual; no "
            "ResourceSlices are published until then",
        )
        return False
