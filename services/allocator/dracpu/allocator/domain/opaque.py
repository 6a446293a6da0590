"""The claim's opaque driver configuration (`status.allocation.devices.config[].opaque`).

Schema `v1alpha1`, extended compatibly: `cpuConfig.cpuset` (allocator external, in every
grouping, as the reference driver defines it) and per-claim placement policy for the driver's
own placement (allocator cpumanager, groupBy numanode/socket):

| field                            | type            | meaning                                    |
|----------------------------------|-----------------|--------------------------------------------|
| `cpuConfig.strategy`             | packed / spread | core order (spread: across cores)          |
| `cpuConfig.fullPCPUsOnly`        | bool            | whole physical cores only                  |
| `cpuConfig.distributeAcrossNUMA` | bool            | spread evenly over the device's NUMA nodes |
| `cpuConfig.groupSize`            | int >= 1        | CPU group size for distributeAcrossNUMA    |
| `cpuConfig.alignUncoreCache`     | bool            | prefer whole uncore (L3) caches (default)  |
| `cpuConfig.isolated`             | prefer / require / avoid | the kernel's isolated CPUs (below) |
| `cpuConfig.memoryPlacement`      | local / none    | memory on the CPUs' NUMA nodes, or on any  |

`isolated` is explained in `dracpu.allocator.domain.isolation` (unset: other CPUs first).
`memoryPlacement` (unset: the driver's `memoryPlacement`) leaves the CPUs alone, so it is
accepted in every mode, next to an explicit cpuset and on individual devices too.

Unknown fields and values are refused, so a typo never silently changes a placement.

The configuration is parsed once, when the allocator receives the claim (`parse_configs`, in
the wire translation of its PrepareRequest): every entry of this driver becomes a
`ParsedConfig` holding its typed `ClaimParameters`, or the words that refused them, and the
claim's entries a `ClaimConfig` that travels with the prepare. The rules that read it, where
the node's facts are known, are `dracpu.allocator.claims.rules`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, cast

from dracpu.allocator.domain.isolation import CHOICES as ISOLATION_CHOICES
from dracpu.allocator.domain.isolation import Isolation
from dracpu.core.config import MEMORY_PLACEMENTS, MemoryPlacement
from dracpu.core.cpuset import CPUSet
from dracpu.core.documents import load_json
from dracpu.core.driver import DRIVER_NAME
from dracpu.core.errors import CPUSetError, InvalidInputError

API_VERSION = "v1alpha1"
FROM_CLAIM = "FromClaim"
FROM_CLASS = "FromClass"

Strategy = Literal["packed", "spread"]
# Who chooses a result's CPUs: the scheduler (individual CPU devices), the claim (allocator
# external: its cpuset) or the driver (allocator cpumanager: its placement policy).
Chooser = Literal["scheduler", "claim", "driver"]


@dataclass(frozen=True, slots=True)
class OpaqueConfig:
    """One opaque configuration entry as the claim's allocation status lists it."""

    source: str
    requests: tuple[str, ...]
    driver: str
    parameters: bytes


@dataclass(frozen=True, slots=True)
class ClaimParameters:
    """One entry's parameters, parsed: an explicit cpuset, or placement policy fields (or
    neither), and where the memory goes. None for a field the entry leaves unset."""

    cpuset: CPUSet | None = None
    strategy: Strategy | None = None
    full_pcpus_only: bool | None = None
    distribute_across_numa: bool | None = None
    group_size: int | None = None
    align_uncore_cache: bool | None = None
    isolated: Isolation | None = None
    memory_placement: MemoryPlacement | None = None
    # The placement policy fields it sets, as the schema spells them, in the schema's order.
    policy_fields: tuple[str, ...] = ()
    # Sets the memory placement and nothing else: it takes no part in choosing the CPUs, so
    # the rules on how many configs may target a request leave it out.
    memory_only: bool = False


def parse_parameters(raw: bytes) -> ClaimParameters:
    document = load_json(raw or b"null", "opaque config")
    if not isinstance(document, dict):
        raise InvalidInputError("opaque config: parameters must be a JSON object")
    version = document.get("apiVersion")
    if version != API_VERSION:
        raise InvalidInputError(
            f"opaque config: unsupported apiVersion {version!r} (supported: {API_VERSION})"
        )
    # The schema library loads with the first claim that carries a configuration.
    from pydantic import ValidationError

    from dracpu.allocator.domain.opaque_schema import POLICY_FIELDS, Parameters

    try:
        parsed = Parameters.model_validate(document)
    except ValidationError as exc:
        first = exc.errors()[0]
        location = ".".join(str(p) for p in first["loc"])
        if first["type"] == "extra_forbidden":
            raise InvalidInputError(f"opaque config: unknown field {location!r}") from None
        if first["type"] == "missing":
            raise InvalidInputError(f"opaque config: missing field {location!r}") from None
        raise InvalidInputError(f"opaque config: field {location!r}: {first['msg']}") from None
    config = parsed.cpu_config
    if config.isolated is not None and config.isolated not in ISOLATION_CHOICES:
        raise InvalidInputError(
            f"opaque config: cpuConfig.isolated: {config.isolated!r} is not one of "
            f"{', '.join(ISOLATION_CHOICES)}"
        )
    if config.memory_placement is not None and config.memory_placement not in MEMORY_PLACEMENTS:
        raise InvalidInputError(
            f"opaque config: cpuConfig.memoryPlacement: {config.memory_placement!r} is not one "
            f"of {', '.join(MEMORY_PLACEMENTS)}"
        )
    cpuset = None
    if config.cpuset is not None:
        if not config.cpuset.strip():
            raise InvalidInputError("opaque config: cpuConfig.cpuset is empty")
        try:
            cpuset = CPUSet.parse(config.cpuset)
        except CPUSetError as exc:
            raise InvalidInputError(f"opaque config: cpuConfig.cpuset: {exc}") from None
    policy_fields = tuple(
        alias for name, alias in POLICY_FIELDS if getattr(config, name) is not None
    )
    return ClaimParameters(
        cpuset=cpuset,
        strategy=config.strategy,
        full_pcpus_only=config.full_pcpus_only,
        distribute_across_numa=config.distribute_across_numa,
        group_size=config.group_size,
        align_uncore_cache=config.align_uncore_cache,
        # Checked against their choices above.
        isolated=cast(Isolation | None, config.isolated),
        memory_placement=cast(MemoryPlacement | None, config.memory_placement),
        policy_fields=policy_fields,
        memory_only=(config.memory_placement is not None and cpuset is None and not policy_fields),
    )


@dataclass(frozen=True, slots=True)
class ParsedConfig:
    """One opaque configuration entry of this driver, parsed when the claim arrived: its
    `parameters`, or (None) the words that refused them."""

    source: str
    requests: tuple[str, ...]
    parameters: ClaimParameters | None
    refusal: str = ""


@dataclass(frozen=True, slots=True)
class ClaimConfig:
    """The claim's opaque configuration for this driver, every entry parsed once, in the order
    the claim lists them."""

    entries: tuple[ParsedConfig, ...] = ()


def parse_configs(configs: Sequence[OpaqueConfig], driver: str = DRIVER_NAME) -> ClaimConfig:
    """The entries of `driver` parsed (another driver's are not ours to read); an entry whose
    parameters are refused keeps the refusal for the rule that reads it."""
    entries = []
    for config in configs:
        if config.driver != driver:
            continue
        try:
            parameters = parse_parameters(config.parameters)
        except InvalidInputError as exc:
            entries.append(ParsedConfig(config.source, config.requests, None, str(exc)))
            continue
        entries.append(ParsedConfig(config.source, config.requests, parameters))
    return ClaimConfig(tuple(entries))
