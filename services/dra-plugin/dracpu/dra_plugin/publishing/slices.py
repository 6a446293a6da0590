"""ResourceSlices for one node-local pool: the desired slices and the plan that gets the API
server there. Pure; mirrors the resourceslice controller of kubernetes/dynamic-resource-allocation
(resourceslice/resourceslicecontroller.go, syncPool): slices are matched to desired positions by
the hex index that starts their name, the pool generation is bumped unless at most one update
is needed, and everything unmatched or of an older generation is deleted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dracpu.core.errors import InvalidInputError
from dracpu.core.names import MAX_ATTRIBUTE_VALUE
from dracpu.dra_plugin.kubelet.metadata import attribute_json
from dracpu.pb.allocator.v1 import allocator_pb2

API_VERSION = "resource.k8s.io/v1"
MAX_DEVICES = 128  # resourceapi.ResourceSliceMaxDevices
MAX_DEVICES_ADVANCED = 64  # ...WithAdvancedFeatures: list-typed attributes count as advanced
INDEX_MIN_WIDTH = 5

Slice = dict[str, Any]


def _check_value_lengths(device: allocator_pb2.Device) -> None:
    """The API server's limit on string attributes, checked before any slice is written: a
    device it would refuse fails the whole sync, never a partial or truncated slice."""
    for name in sorted(device.attributes):
        value = device.attributes[name]
        if value.WhichOneof("value") in ("string", "version"):
            text = getattr(value, str(value.WhichOneof("value")))
            if len(text) > MAX_ATTRIBUTE_VALUE:
                raise InvalidInputError(
                    f"device {device.name}: attribute {name} is {len(text)} characters, over "
                    f"the API server's limit of {MAX_ATTRIBUTE_VALUE}; no slice is published"
                )


def device_json(device: allocator_pb2.Device) -> dict[str, Any]:
    """resource.k8s.io/v1 Device for one allocator device."""
    _check_value_lengths(device)
    out: dict[str, Any] = {"name": device.name}
    if device.attributes:
        out["attributes"] = {
            k: attribute_json(device.attributes[k]) for k in sorted(device.attributes)
        }
    if device.capacity:
        out["capacity"] = {k: {"value": device.capacity[k]} for k in sorted(device.capacity)}
    if device.allow_multiple_allocations:
        out["allowMultipleAllocations"] = True
    if device.node_allocatable_resources:
        resources: dict[str, Any] = {}
        for name in sorted(device.node_allocatable_resources):
            m = device.node_allocatable_resources[name]
            if m.capacity_key:
                mapping = {
                    "capacityKey": m.capacity_key,
                    "capacityMultiplier": m.capacity_multiplier,
                }
            else:
                mapping = {"deviceMultiplier": m.device_multiplier}
            resources[name] = {"mapping": mapping}
        out["nodeAllocatableResources"] = resources
    return out


def chunk_documents(
    documents: Sequence[dict[str, Any]], advanced: bool
) -> list[list[dict[str, Any]]]:
    """Device documents in slice-sized chunks, in order (smaller when `advanced`: list
    attributes); no documents make one empty slice."""
    size = MAX_DEVICES_ADVANCED if advanced else MAX_DEVICES
    chunks = [list(documents[i : i + size]) for i in range(0, len(documents), size)]
    return chunks or [[]]


def index_width(count: int) -> int:
    return max(INDEX_MIN_WIDTH, len(f"{max(count - 1, 0):x}"))


def encode_index(index: int, width: int) -> str:
    return f"{index:0{width}x}"


def decode_index(name: str, width: int) -> int | None:
    prefix, sep, _ = name.partition("-")
    if not sep or len(prefix) != width:
        return None
    try:
        return int(prefix, 16)
    except ValueError:
        return None


@dataclass(frozen=True)
class Owner:
    """The Node object the slices belong to (garbage-collected with it)."""

    name: str
    uid: str

    def reference(self) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "name": self.name,
            "uid": self.uid,
            "controller": True,
        }


@dataclass
class Plan:
    generation: int
    delete: list[Slice] = field(default_factory=list)
    update: list[Slice] = field(default_factory=list)
    create: list[Slice] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.delete or self.update or self.create)


def _spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = obj.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def _generation(obj: Mapping[str, Any]) -> int:
    pool = _spec(obj).get("pool")
    try:
        return int(pool.get("generation", 0)) if isinstance(pool, Mapping) else 0
    except (TypeError, ValueError):
        return 0


def _name(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata")
    return str(meta.get("name", "")) if isinstance(meta, Mapping) else ""


def plan(
    existing: Sequence[Slice],
    chunks: Sequence[Sequence[dict[str, Any]]],
    *,
    driver: str,
    node: str,
    pool: str,
    owner: Owner | None,
) -> Plan:
    """What to delete, update and create so the pool holds exactly `chunks`."""
    generation = max((_generation(s) for s in existing), default=0)
    width = index_width(len(chunks))
    matched: dict[int, Slice] = {}
    obsolete: list[Slice] = []
    for current in sorted(existing, key=_name):
        index = decode_index(_name(current), width)
        if (
            _generation(current) < generation
            or index is None
            or not 0 <= index < len(chunks)
            or index in matched
            or _spec(current).get("pool", {}).get("name") != pool
        ):
            obsolete.append(current)
            continue
        matched[index] = current

    def desired_pool(gen: int) -> dict[str, Any]:
        return {"name": pool, "generation": gen, "resourceSliceCount": len(chunks)}

    # With no Node to own them (owner None) the slices keep whatever owner they have.
    owners = [owner.reference()] if owner is not None else None

    def owned_differently(current: Slice) -> bool:
        meta = current.get("metadata")
        refs = meta.get("ownerReferences") if isinstance(meta, Mapping) else None
        return owners is not None and (refs or []) != owners

    changed = {
        i
        for i, current in matched.items()
        if _spec(current).get("pool") != desired_pool(generation)
        or (_spec(current).get("devices") or []) != list(chunks[i])
        or _spec(current).get("nodeName") != node
        or owned_differently(current)
    }
    new = len(chunks) - len(matched)
    bumped = not (new == 0 and len(changed) <= 1)
    if bumped:
        generation += 1
    result = Plan(generation=generation, delete=obsolete)
    for i, current in sorted(matched.items()):
        if i not in changed and not bumped:
            continue
        updated = dict(current)
        spec = dict(_spec(current))
        spec.update(
            driver=driver, nodeName=node, pool=desired_pool(generation), devices=list(chunks[i])
        )
        updated["spec"] = spec
        if owners is not None:
            updated["metadata"] = dict(current.get("metadata") or {}, ownerReferences=owners)
        result.update.append(updated)
    prefix_tail = f"-{driver}-" + (f"{owner.name}-" if owner else "")
    for i in range(len(chunks)):
        if i in matched:
            continue
        metadata: dict[str, Any] = {"generateName": encode_index(i, width) + prefix_tail}
        if owner is not None:
            metadata["ownerReferences"] = [owner.reference()]
        result.create.append(
            {
                "apiVersion": API_VERSION,
                "kind": "ResourceSlice",
                "metadata": metadata,
                "spec": {
                    "driver": driver,
                    "pool": desired_pool(generation),
                    "nodeName": node,
                    "devices": list(chunks[i]),
                },
            }
        )
    return result
