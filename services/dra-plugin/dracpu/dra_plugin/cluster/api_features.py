"""Optional API fields the API server may not support, and what to do without them.

Three device fields exist only behind feature gates of the API server: the node-allocatable
mapping (`nodeAllocatableResources`, gate DRANodeAllocatableResources, and the Node must declare
the feature), list-typed attribute values (`strings`/`ints`, gate DRAListTypeAttributes) and
device taints (`taints`, gate DRADeviceTaints: beta and on by default from Kubernetes 1.36, GA
in 1.37; `publishing.taints`). A server without them either refuses the write (403/422, with a
message naming the field) or silently drops the field. Either way the plugin notices once, says
so once with the server's own words, and from then on publishes the slices without the field: a
refused slice would leave the node without devices, a dropped field would make every comparison
differ and rewrite the slices forever.

One more is not in slices: ResourceClaim `status.devices` (gate DRAResourceClaimDeviceStatus,
on by default from 1.33, GA in 1.37), where the plugin says what each claim got
(`cluster.status_writer`). A server without it refuses or drops the field; claims are
prepared as before, only their status is not written.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from dracpu.core.log import get_logger

log = get_logger(__name__)

Device = dict[str, Any]
LIST_KINDS = ("strings", "ints", "bools", "versions")


def _uses_mapping(device: Device) -> bool:
    return "nodeAllocatableResources" in device


def _drop_mapping(device: Device) -> Device:
    return {k: v for k, v in device.items() if k != "nodeAllocatableResources"}


def _is_list(value: Any) -> bool:
    return isinstance(value, dict) and any(kind in value for kind in LIST_KINDS)


def _uses_lists(device: Device) -> bool:
    return any(_is_list(v) for v in (device.get("attributes") or {}).values())


def _drop_lists(device: Device) -> Device:
    attributes = {k: v for k, v in (device.get("attributes") or {}).items() if not _is_list(v)}
    out = {k: v for k, v in device.items() if k != "attributes"}
    if attributes:
        out["attributes"] = attributes
    return out


def _uses_taints(device: Device) -> bool:
    return "taints" in device


def _drop_taints(device: Device) -> Device:
    return {k: v for k, v in device.items() if k != "taints"}


def _list_names(device: Device) -> list[str]:
    return [k for k, v in (device.get("attributes") or {}).items() if _is_list(v)]


@dataclass(frozen=True)
class Feature:
    name: str  # the device field, as the health view reports it
    gate: str  # the API server feature gate that enables it
    keywords: tuple[str, ...]  # words a refusal message names it by
    used: Callable[[Device], bool]
    drop: Callable[[Device], Device]
    # Message fragments naming what a device sent with the feature: a server without the
    # list-attributes gate drops the list and then refuses the attribute left empty
    # ("spec.devices[0].attributes[<name>]: Invalid value: \"\": must specify one of ...").
    fragments: Callable[[Device], list[str]] = lambda device: []

    def named_in(self, message: str, sent: Sequence[Device]) -> bool:
        lowered = message.lower()
        if any(word.lower() in lowered for word in self.keywords):
            return True
        return any(part in message for d in sent if self.used(d) for part in self.fragments(d))


NODE_ALLOCATABLE = Feature(
    "nodeAllocatableResources",
    "DRANodeAllocatableResources",
    ("nodeAllocatableResources", "DRANodeAllocatableResources", "declaredFeatures"),
    _uses_mapping,
    _drop_mapping,
)
LIST_ATTRIBUTES = Feature(
    "listTypeAttributes",
    "DRAListTypeAttributes",
    ("DRAListTypeAttributes", "list-type", "list type"),
    _uses_lists,
    _drop_lists,
    lambda device: [f"attributes[{name}]" for name in _list_names(device)],
)
DEVICE_TAINTS = Feature(
    "taints",
    "DRADeviceTaints",
    ("DRADeviceTaints",),
    _uses_taints,
    _drop_taints,
)
FEATURES = (NODE_ALLOCATABLE, LIST_ATTRIBUTES, DEVICE_TAINTS)
# Not a ResourceSlice field: never in a device, so never dropped from one.
CLAIM_DEVICE_STATUS = Feature(
    "resourceClaimDeviceStatus",
    "DRAResourceClaimDeviceStatus",
    (),
    lambda device: False,
    lambda device: device,
)


@dataclass(frozen=True)
class MissingFeature:
    name: str
    gate: str
    reason: str  # the server's message, or what it did to the field
    detected_at: float


class FeatureSupport:
    """What this API server lacks, learned from its answers; at most one verdict per feature
    for the life of the process."""

    def __init__(self, on_missing: Callable[[MissingFeature], None] = lambda f: None) -> None:
        self.missing: dict[str, MissingFeature] = {}
        self._on_missing = on_missing

    def devices(self, devices: Sequence[Device]) -> list[Device]:
        """`devices` without the fields the server lacks."""
        lacking = [f for f in FEATURES if f.name in self.missing]
        out = list(devices)
        for feature in lacking:
            out = [feature.drop(d) if feature.used(d) else d for d in out]
        return out

    def advanced(self, devices: Sequence[Device]) -> bool:
        """Whether a slice of `devices` holds at most 64 of them: list attributes or taints
        (resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures)."""
        return any(_uses_lists(d) or _uses_taints(d) for d in devices)

    def supports(self, feature: Feature) -> bool:
        """Not known to be missing (a feature is assumed until the server shows otherwise)."""
        return feature.name not in self.missing

    def refused(self, message: str, sent: Sequence[Device]) -> MissingFeature | None:
        """A write of `sent` was refused with `message`: the feature it names, if any, is
        missing (recorded); None when the refusal is about something else."""
        for feature in FEATURES:
            if feature.name in self.missing or not any(feature.used(d) for d in sent):
                continue
            if feature.named_in(message, sent):
                return self._mark(feature, message)
        return None

    def dropped(self, sent: Sequence[Device], stored: Sequence[Device]) -> list[MissingFeature]:
        """The server stored `stored` for `sent`: every feature whose field it removed."""
        found = []
        for feature in FEATURES:
            if feature.name in self.missing:
                continue
            if any(feature.used(d) for d in sent) and not any(feature.used(d) for d in stored):
                reason = (
                    f"the API server dropped spec.devices[].{feature.name} from the stored "
                    f"ResourceSlice (is its {feature.gate} feature gate off?)"
                )
                found.append(self._mark(feature, reason))
        return found

    def lacking(
        self,
        feature: Feature,
        reason: str,
        what: str = "the API server lacks ResourceClaim device status; claims are prepared "
        "without writing it",
    ) -> MissingFeature:
        """A feature turned out missing outside a slice write (the claim status, a check made
        beforehand): recorded and logged once."""
        known = self.missing.get(feature.name)
        if known is not None:
            return known
        return self._mark(feature, reason, what)

    def _mark(
        self,
        feature: Feature,
        reason: str,
        what: str = "the API server lacks an optional ResourceSlice feature; publishing without it",
    ) -> MissingFeature:
        missing = MissingFeature(feature.name, feature.gate, reason, time.time())
        self.missing[feature.name] = missing
        log.warning(what, feature=feature.name, gate=feature.gate, reason=reason)
        self._on_missing(missing)
        return missing
