"""What a ResourceClaim, ResourceClaimTemplate or DeviceClass may not carry in its `dra.cpu`
opaque configuration, whatever node its claims land on: the refusals the chart's admission
policy gives at `kubectl apply` and `dracpu validate` gives offline.

An entry's parameters are refused when the prepare would refuse them on every node: the
parser refuses them (`dracpu.allocator.domain.opaque.parse_parameters`), or the rules of
`dracpu.allocator.claims.rules` do, read as the entry is written for: an entry with a cpuset
for the external allocator, any other for the driver's own placement. So the words are the
prepare's own. Entries of other drivers are not ours to read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from dracpu.allocator.claims.rules import explicit_cpuset, placement_policy
from dracpu.allocator.domain.opaque import (
    CONFIG_PATHS,
    FROM_CLAIM,
    ClaimConfig,
    ParsedConfig,
    parse_parameters,
)
from dracpu.core.driver import DRIVER_NAME
from dracpu.core.errors import InvalidInputError

_REQUEST = "request"


def parameters_refusal(raw: bytes) -> str:
    """Why every node's prepare would refuse these parameters, or "" when none would for a
    reason of their own."""
    try:
        parameters = parse_parameters(raw)
        config = ClaimConfig((ParsedConfig(FROM_CLAIM, (), parameters),))
        if parameters.cpuset is not None:
            explicit_cpuset(config, _REQUEST)
        else:
            placement_policy(config, _REQUEST, threads_per_core=1)
    except InvalidInputError as exc:
        return str(exc)
    return ""


@dataclass(frozen=True, slots=True)
class Refusal:
    """One refused field of an object, and why."""

    field: str  # e.g. spec.devices.config[0].opaque.parameters
    message: str


def _configs(document: Mapping[str, object], path: tuple[str, ...]) -> list[object] | Refusal:
    node: object = document
    for depth, key in enumerate(path):
        if node is None:
            return []
        if not isinstance(node, Mapping):
            return Refusal(".".join(path[:depth]), "must be an object")
        node = node.get(key)
    if node is None:
        return []
    if not isinstance(node, list):
        return Refusal(".".join(path), "must be a list")
    return node


def object_refusals(document: Mapping[str, object]) -> list[Refusal]:
    """The refused entries of one object of a kind in CONFIG_PATHS, in its order."""
    import json

    _, path = CONFIG_PATHS[str(document.get("kind"))]
    configs = _configs(document, path)
    if isinstance(configs, Refusal):
        return [configs]
    refused = []
    for index, entry in enumerate(configs):
        opaque = entry.get("opaque") if isinstance(entry, Mapping) else None
        if not isinstance(opaque, Mapping) or opaque.get("driver") != DRIVER_NAME:
            continue
        # As the API server holds them: JSON (a YAML date is a string there).
        raw = json.dumps(opaque.get("parameters"), default=str).encode()
        message = parameters_refusal(raw)
        if message:
            refused.append(Refusal(f"{'.'.join(path)}[{index}].opaque.parameters", message))
    return refused
