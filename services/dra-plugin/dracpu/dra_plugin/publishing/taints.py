"""Device taints (resource.k8s.io/v1 `Device.taints`, KEP-5055) for the devices the node cannot
give: pure, from the allocator's device health.

- `dra.cpu/offline`: CPUs of the device are offline or gone (health Unhealthy, its missing CPUs
  known). A device whose CPUs are all gone is no longer in the allocator's list (individual
  mode: every offline CPU's device; grouped: a NUMA node, socket or machine wholly offline); it
  stays published as it was last, tainted, so the scheduler and `kubectl` see why it cannot be
  had rather than a device that silently vanished.
- `dra.cpu/unhealthy`: health Unhealthy for any other reason.

Both have effect NoSchedule: new claims keep off the device unless they tolerate the taint;
claims already allocated are left alone (the allocator refuses to prepare CPUs it lacks). Health
Unknown (the topology cannot be read) taints nothing: it says nothing about the CPUs, and a
passing read error would close the whole node to new claims.

The value names the CPUs. A taint value must be a label value (at most 63 characters of
alphanumerics, '-', '_' and '.', starting and ending alphanumeric: IsValidLabelValue, as
pkg/apis/resource/validation's validateDeviceTaint checks it), so the cpuset `0-3,8` is written
`0-3_8`; a list too long ends with `_plus-N`, N the CPUs left out. `timeAdded` is when the
condition began (the health's last change), kept from the published device while the same key
stays on it, so the API server's copy and ours never differ.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from dracpu.core.cpuset import CPUSet
from dracpu.pb.allocator.v1 import allocator_pb2

OFFLINE = "dra.cpu/offline"
UNHEALTHY = "dra.cpu/unhealthy"
KEYS = (OFFLINE, UNHEALTHY)
EFFECT = "NoSchedule"
MAX_VALUE = 63  # validation.LabelValueMaxLength

Document = dict[str, Any]


def cpus_value(cpus: CPUSet) -> str:
    """`cpus` as a taint value: `0-3,8` -> `0-3_8`; cut at whole ranges to fit, then
    `_plus-N`."""
    ranges = cpus.format().split(",") if cpus else []
    text = "_".join(ranges)
    if len(text) <= MAX_VALUE:
        return text
    kept: list[str] = []
    for part in ranges:
        candidate = [*kept, part]
        left = len(cpus) - len(CPUSet.parse(",".join(candidate)))
        if len("_".join([*candidate, f"plus-{left}"])) > MAX_VALUE:
            break
        kept = candidate
    left = len(cpus) - (len(CPUSet.parse(",".join(kept))) if kept else 0)
    return "_".join([*kept, f"plus-{left}"])


def timestamp(unix: float) -> str:
    """metav1.Time as the API server writes it back (RFC 3339, whole seconds, UTC)."""
    return datetime.fromtimestamp(int(unix), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _taint(key: str, value: str, added: str) -> Document:
    taint: Document = {"key": key, "effect": EFFECT, "timeAdded": added}
    if value:
        taint["value"] = value
    return taint


def health_taints(
    health: allocator_pb2.DeviceHealth | None,
    device_cpus: CPUSet,
    published: Sequence[Mapping[str, Any]],
    now: float,
) -> list[Document]:
    """The driver's taints of one device: none while Healthy, Unknown or unreported.
    `published` is the device's taints as last published (their `timeAdded` is kept)."""
    if health is None or health.status != "Unhealthy":
        return []
    missing = CPUSet.parse(health.missing_cpus) if health.missing_cpus else CPUSet()
    key, cpus = (OFFLINE, missing) if missing else (UNHEALTHY, device_cpus)
    added = next(
        (str(t["timeAdded"]) for t in published if t.get("key") == key and t.get("timeAdded")),
        timestamp(health.since_unix or now),
    )
    return [_taint(key, cpus_value(cpus), added)]


def _own(document: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [t for t in document.get("taints") or [] if t.get("key") in KEYS]


def _without_taints(document: Mapping[str, Any]) -> Document:
    return {k: v for k, v in document.items() if k != "taints"}


def tainted(
    documents: Sequence[Document],
    devices: allocator_pb2.DeviceList,
    published: Mapping[str, Mapping[str, Any]],
    now: float,
    *,
    keep_withdrawn: bool = True,
) -> list[Document]:
    """The allocator's device documents (in `devices`' order, from `device_json`) with their
    taints, and, when `keep_withdrawn`, every device withdrawn for offline CPUs that was
    `published` (name -> the device as last published) put back as it was, tainted, in its place
    by name (numbers compared as numbers, as the allocator orders its devices)."""
    out: list[Document] = []
    names = set()
    for document, device in zip(documents, devices.devices, strict=True):
        names.add(device.name)
        before = published.get(device.name, {})
        taints = health_taints(
            devices.health.get(device.name),
            CPUSet.parse(device.cpus) if device.cpus else CPUSet(),
            _own(before),
            now,
        )
        out.append({**document, "taints": taints} if taints else document)
    kept = []
    for name in sorted(set(devices.health) - names) if keep_withdrawn else []:
        health = devices.health[name]
        last = published.get(name)
        if last is None or health.status != "Unhealthy" or not health.missing_cpus:
            continue
        taints = health_taints(health, CPUSet(), _own(last), now)
        kept.append({**_without_taints(last), "taints": taints})
    if not kept:
        return out  # the allocator's order, untouched
    return sorted([*out, *kept], key=lambda d: _natural(str(d["name"])))


def _natural(name: str) -> tuple[tuple[int, int | str], ...]:
    """`cpudev999` before `cpudev1000`, as the allocator numbers its devices."""
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"(\d+)", name) if p)
