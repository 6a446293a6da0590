"""A ResourceClaim (resource.k8s.io/v1) as this driver reads it: typed, frozen, parsed once.

`ClaimRef` is what the kubelet names a claim by. `parse_claim` reads the API server's JSON
where it enters the driver and keeps exactly what the driver uses: the metadata (uid, name,
namespace, generation, the pod-claim-name annotation), whether the claim is allocated, this
driver's allocation results and opaque configurations, the pods in status.reservedFor and
this driver's status.devices entries. The spec is not read (the allocation says what was
chosen), nor anything else. The driver writes back only its own status.devices entries
(`DeviceStatus.to_json`, server-side applied), never the object. A malformed field is an
InvalidInputError naming its path, never a KeyError or TypeError; another driver's results,
configurations and entries are read no further than their driver's name.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dracpu.core.errors import InvalidInputError
from dracpu.core.names import (
    MAX_LABEL,
    MAX_SUBDOMAIN,
    check_namespace,
    check_object_name,
    check_uid,
)

# resource.k8s.io/v1 PodResourceClaimAnnotation: set on claims generated from a template.
POD_CLAIM_NAME_ANNOTATION = "resource.kubernetes.io/pod-claim-name"

# driver, pool, device, shareID ("" when none): how the API keys the status.devices list.
DeviceKey = tuple[str, str, str, str]


@dataclass(frozen=True, slots=True)
class ClaimRef:
    """What the kubelet sends for a claim: namespace, name and the UID it expects."""

    namespace: str
    name: str
    uid: str

    def __str__(self) -> str:
        return f"{self.namespace[:MAX_LABEL]}/{self.name[:MAX_SUBDOMAIN]}"

    def check(self) -> ClaimRef:
        """The kubelet's names as the API server accepts them: a namespace or name with '/'
        or '..' would otherwise turn into a path outside the metadata folder."""
        check_namespace(self.namespace, "claim namespace")
        check_object_name(self.name, "claim name")
        check_uid(self.uid)
        return self


@dataclass(frozen=True, slots=True)
class DeviceResult:
    """One of this driver's allocation results (status.allocation.devices.results[])."""

    request: str
    driver: str
    pool: str
    device: str
    consumed_capacity: tuple[tuple[str, str], ...] = ()  # (capacity name, quantity), in order
    admin_access: bool = False
    share_id: str = ""

    @property
    def key(self) -> DeviceKey:
        return (self.driver, self.pool, self.device, self.share_id)


@dataclass(frozen=True, slots=True)
class OpaqueConfig:
    """One of this driver's configurations (status.allocation.devices.config[] with an opaque
    entry for it); `parameters` is the opaque parameters' JSON text, b"" when absent."""

    source: str
    requests: tuple[str, ...]
    driver: str
    parameters: bytes = b""


@dataclass(frozen=True, slots=True)
class Condition:
    """A metav1.Condition of a status.devices entry."""

    type: str
    status: str
    reason: str = ""
    message: str = ""
    last_transition_time: str = ""
    observed_generation: int = 0

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "type": self.type,
            "status": self.status,
            "reason": self.reason,
            "message": self.message,
            "lastTransitionTime": self.last_transition_time,
        }
        if self.observed_generation:
            out["observedGeneration"] = self.observed_generation
        return out


@dataclass(frozen=True, slots=True)
class DeviceStatus:
    """One status.devices entry (AllocatedDeviceStatus). `data` is kept as the JSON it is:
    only this driver writes it, and nothing reads it back."""

    driver: str
    pool: str
    device: str
    share_id: str = ""
    conditions: tuple[Condition, ...] = ()
    data: Mapping[str, Any] | None = None

    @property
    def key(self) -> DeviceKey:
        return (self.driver, self.pool, self.device, self.share_id)

    def to_json(self) -> dict[str, Any]:
        """The entry as the API holds it; what server-side apply sends."""
        out: dict[str, Any] = {"driver": self.driver, "pool": self.pool, "device": self.device}
        if self.share_id:
            out["shareID"] = self.share_id
        if self.conditions:
            out["conditions"] = [c.to_json() for c in self.conditions]
        if self.data is not None:
            out["data"] = self.data
        return out


@dataclass(frozen=True, slots=True)
class ResourceClaim:
    """What the driver reads of a ResourceClaim; results, configs and devices are this
    driver's only."""

    namespace: str
    name: str
    uid: str
    generation: int = 0
    pod_claim_name: str | None = None
    allocated: bool = False
    results: tuple[DeviceResult, ...] = ()
    configs: tuple[OpaqueConfig, ...] = ()
    # UIDs of the core-group `pods` entries of status.reservedFor, in order.
    reserved_pods: tuple[str, ...] = ()
    devices: tuple[DeviceStatus, ...] = ()


# ---- parsing: one reader per shape, each naming the path of what it reads --------------------


def _object(value: object, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidInputError(f"{where}: expected an object, got {type(value).__name__}")
    return value


def _list(value: object, where: str) -> Sequence[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise InvalidInputError(f"{where}: expected a list, got {type(value).__name__}")
    return value


def _string(value: object, where: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InvalidInputError(f"{where}: expected a string, got {type(value).__name__}")
    return value


def _flag(value: object, where: str) -> bool:
    if value is None:
        return False
    if not isinstance(value, bool):
        raise InvalidInputError(f"{where}: expected true or false, got {type(value).__name__}")
    return value


def _count(value: object, where: str) -> int:
    if value is None:
        return 0
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InvalidInputError(f"{where}: expected a non-negative integer, got {value!r:.40}")
    return value


def _result(item: object, where: str, driver: str) -> DeviceResult | None:
    """This driver's allocation result, None for another driver's (read no further)."""
    entry = _object(item, where)
    if _string(entry.get("driver"), f"{where}.driver") != driver:
        return None
    consumed = _object(entry.get("consumedCapacity"), f"{where}.consumedCapacity")
    return DeviceResult(
        request=_string(entry.get("request"), f"{where}.request"),
        driver=driver,
        pool=_string(entry.get("pool"), f"{where}.pool"),
        device=_string(entry.get("device"), f"{where}.device"),
        consumed_capacity=tuple(
            (str(name), _string(value, f"{where}.consumedCapacity[{name!r}]"))
            for name, value in consumed.items()
        ),
        admin_access=_flag(entry.get("adminAccess"), f"{where}.adminAccess"),
        share_id=_string(entry.get("shareID"), f"{where}.shareID"),
    )


def _config(item: object, where: str, driver: str) -> OpaqueConfig | None:
    """This driver's opaque configuration, None for another driver's."""
    entry = _object(item, where)
    opaque = _object(entry.get("opaque"), f"{where}.opaque")
    if _string(opaque.get("driver"), f"{where}.opaque.driver") != driver:
        return None
    parameters = opaque.get("parameters")
    return OpaqueConfig(
        source=_string(entry.get("source"), f"{where}.source"),
        requests=tuple(
            _string(r, f"{where}.requests[{i}]")
            for i, r in enumerate(_list(entry.get("requests"), f"{where}.requests"))
        ),
        driver=driver,
        parameters=b"" if parameters is None else json.dumps(parameters).encode(),
    )


def _reserved_pod(item: object, where: str) -> str:
    """The pod UID of a core-group `pods` consumer, "" for any other consumer."""
    entry = _object(item, where)
    resource = _string(entry.get("resource"), f"{where}.resource")
    group = _string(entry.get("apiGroup"), f"{where}.apiGroup")
    uid = _string(entry.get("uid"), f"{where}.uid")
    return uid if resource == "pods" and not group else ""


def _condition(item: object, where: str) -> Condition:
    entry = _object(item, where)
    return Condition(
        type=_string(entry.get("type"), f"{where}.type"),
        status=_string(entry.get("status"), f"{where}.status"),
        reason=_string(entry.get("reason"), f"{where}.reason"),
        message=_string(entry.get("message"), f"{where}.message"),
        last_transition_time=_string(
            entry.get("lastTransitionTime"), f"{where}.lastTransitionTime"
        ),
        observed_generation=_count(entry.get("observedGeneration"), f"{where}.observedGeneration"),
    )


def parse_device_status(item: object, where: str, driver: str) -> DeviceStatus | None:
    """`driver`'s status.devices entry, None for another driver's (read no further); `where`
    is its path, for errors."""
    entry = _object(item, where)
    if _string(entry.get("driver"), f"{where}.driver") != driver:
        return None
    data = entry.get("data")
    return DeviceStatus(
        driver=driver,
        pool=_string(entry.get("pool"), f"{where}.pool"),
        device=_string(entry.get("device"), f"{where}.device"),
        share_id=_string(entry.get("shareID"), f"{where}.shareID"),
        conditions=tuple(
            _condition(c, f"{where}.conditions[{i}]")
            for i, c in enumerate(_list(entry.get("conditions"), f"{where}.conditions"))
        ),
        data=None if data is None else _object(data, f"{where}.data"),
    )


def parse_claim(obj: object, driver: str, where: str = "claim") -> ResourceClaim:
    """The ResourceClaim JSON `obj` as `driver` reads it; `where` prefixes every error."""
    claim = _object(obj, where)
    metadata = _object(claim.get("metadata"), f"{where}: metadata")
    annotations = _object(metadata.get("annotations"), f"{where}: metadata.annotations")
    pod_claim = _string(
        annotations.get(POD_CLAIM_NAME_ANNOTATION),
        f"{where}: metadata.annotations[{POD_CLAIM_NAME_ANNOTATION!r}]",
    )
    status = _object(claim.get("status"), f"{where}: status")
    raw_allocation = status.get("allocation")
    allocation = _object(raw_allocation, f"{where}: status.allocation")
    devices = _object(allocation.get("devices"), f"{where}: status.allocation.devices")
    results_path = f"{where}: status.allocation.devices.results"
    results = tuple(
        result
        for i, item in enumerate(_list(devices.get("results"), results_path))
        if (result := _result(item, f"{results_path}[{i}]", driver)) is not None
    )
    config_path = f"{where}: status.allocation.devices.config"
    configs = tuple(
        config
        for i, item in enumerate(_list(devices.get("config"), config_path))
        if (config := _config(item, f"{config_path}[{i}]", driver)) is not None
    )
    reserved_path = f"{where}: status.reservedFor"
    pods = tuple(
        uid
        for i, item in enumerate(_list(status.get("reservedFor"), reserved_path))
        if (uid := _reserved_pod(item, f"{reserved_path}[{i}]"))
    )
    status_path = f"{where}: status.devices"
    entries = tuple(
        entry
        for i, item in enumerate(_list(status.get("devices"), status_path))
        if (entry := parse_device_status(item, f"{status_path}[{i}]", driver)) is not None
    )
    return ResourceClaim(
        namespace=_string(metadata.get("namespace"), f"{where}: metadata.namespace"),
        name=_string(metadata.get("name"), f"{where}: metadata.name"),
        uid=_string(metadata.get("uid"), f"{where}: metadata.uid"),
        generation=_count(metadata.get("generation"), f"{where}: metadata.generation"),
        pod_claim_name=pod_claim or None,
        allocated=bool(raw_allocation),
        results=results,
        configs=configs,
        reserved_pods=pods,
        devices=entries,
    )
