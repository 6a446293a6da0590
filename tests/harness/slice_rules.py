"""What the API server refuses in a ResourceSlice's devices beyond its OpenAPI schema
(resource.k8s.io/v1 validation): device names are DNS labels; attribute and capacity names are
a C identifier of at most 32 characters, after an optional DNS-subdomain domain and a slash;
a device has at most 32 attributes and capacities together; a capacity is a quantity."""

from __future__ import annotations

import re
from typing import Any

_C_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# A Kubernetes quantity: a signed decimal number and an optional suffix.
_QUANTITY = re.compile(
    r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?$"
)
MAX_ID = 32
MAX_DOMAIN = 63
MAX_NAMES_PER_DEVICE = 32


def qualified_name_refusal(name: str) -> str | None:
    """Why the API server refuses `name` as an attribute or capacity name; None if it takes it."""
    domain, slash, identifier = name.rpartition("/")
    if slash:
        if not domain or len(domain) > MAX_DOMAIN or not _DNS_SUBDOMAIN.match(domain.lower()):
            return f"{name}: the domain {domain!r} is not a DNS subdomain of at most {MAX_DOMAIN}"
        if "/" in domain:
            return f"{name}: more than one slash"
    if not _C_IDENTIFIER.match(identifier):
        return f"{name}: {identifier!r} is not a C identifier"
    if len(identifier) > MAX_ID:
        return f"{name}: {identifier!r} is longer than {MAX_ID} characters"
    return None


def device_refusals(device: dict[str, Any]) -> list[str]:
    name = str(device.get("name", ""))
    refusals = []
    if len(name) > 63 or not _DNS_LABEL.match(name):
        refusals.append(f"device name {name!r} is not a DNS label")
    attributes = device.get("attributes") or {}
    capacity = device.get("capacity") or {}
    for key in [*attributes, *capacity]:
        refusal = qualified_name_refusal(str(key))
        if refusal:
            refusals.append(f"device {name}: {refusal}")
    if len(attributes) + len(capacity) > MAX_NAMES_PER_DEVICE:
        refusals.append(
            f"device {name}: more than {MAX_NAMES_PER_DEVICE} attributes and capacities"
        )
    for key, value in capacity.items():
        if not _QUANTITY.match(str((value or {}).get("value", ""))):
            refusals.append(f"device {name}: capacity {key}: {value!r} is not a quantity")
    return refusals


def slice_refusals(resource_slice: dict[str, Any]) -> list[str]:
    """Every refusal of the slice's devices, in device order; empty when it would be stored."""
    devices = (resource_slice.get("spec") or {}).get("devices") or []
    return [refusal for device in devices for refusal in device_refusals(device)]
