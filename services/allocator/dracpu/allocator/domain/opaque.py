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
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from dracpu.allocator.algorithm import Policy
from dracpu.allocator.domain.isolation import CHOICES as ISOLATION_CHOICES
from dracpu.allocator.domain.isolation import Isolation
from dracpu.core.config import MEMORY_PLACEMENTS, MemoryPlacement
from dracpu.core.cpuset import CPUSet
from dracpu.core.documents import load_json
from dracpu.core.errors import CPUSetError, InvalidInputError

API_VERSION = "v1alpha1"
FROM_CLAIM = "FromClaim"
FROM_CLASS = "FromClass"

if TYPE_CHECKING:
    from dracpu.allocator.domain.opaque_schema import CPUConfig


@dataclass(frozen=True, slots=True)
class OpaqueConfig:
    """One opaque configuration entry as the claim's allocation status lists it."""

    source: str
    requests: tuple[str, ...]
    driver: str
    parameters: bytes


@dataclass(frozen=True, slots=True)
class ClaimParameters:
    """Parsed parameters: an explicit cpuset, or placement policy fields (or neither)."""

    cpuset: CPUSet | None
    cpu_config: CPUConfig


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

    from dracpu.allocator.domain.opaque_schema import Parameters

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
    return ClaimParameters(cpuset=cpuset, cpu_config=config)


def targets(config: OpaqueConfig, request: str) -> bool:
    """Whether a config applies to a result's request (empty list = every request;
    `req/sub` results match configs naming `req`; resourceclaim.ConfigForResult)."""
    if not config.requests:
        return True
    return request in config.requests or request.split("/", 1)[0] in config.requests


def _matching(configs: Sequence[OpaqueConfig], request: str, driver: str) -> list[OpaqueConfig]:
    matching = []
    for config in configs:
        if config.driver != driver or not targets(config, request):
            continue
        if config.source not in (FROM_CLAIM, FROM_CLASS):
            raise InvalidInputError(
                f"opaque config: source {config.source!r} is neither {FROM_CLAIM} nor {FROM_CLASS}"
            )
        matching.append(config)
    return matching


def memory_only(config: OpaqueConfig) -> bool:
    """A config that sets the memory placement and nothing else: it takes no part in choosing
    the CPUs, so the rules on how many configs may target a request leave it out."""
    parsed = parse_parameters(config.parameters).cpu_config
    return (
        parsed.memory_placement is not None and parsed.cpuset is None and not parsed.policy_fields()
    )


def _placing(configs: Sequence[OpaqueConfig], request: str, driver: str) -> list[OpaqueConfig]:
    return [c for c in _matching(configs, request, driver) if not memory_only(c)]


def explicit_cpuset(configs: Sequence[OpaqueConfig], request: str, driver: str) -> CPUSet:
    """allocator external: the cpuset of the one claim config that targets `request`."""
    matching = _placing(configs, request, driver)
    if any(c.source == FROM_CLASS for c in matching):
        raise InvalidInputError(
            "opaque config: configuration from a DeviceClass is not supported; "
            "custom cpusets must be set per ResourceClaim request"
        )
    if len(matching) != 1:
        raise InvalidInputError(
            f"opaque config: request {request!r} is targeted by {len(matching)} "
            "configurations, must be targeted by exactly 1"
        )
    parameters = parse_parameters(matching[0].parameters)
    extra = parameters.cpu_config.policy_fields()
    if extra:
        raise InvalidInputError(
            f"opaque config: cpuConfig.{extra[0]} is not valid with allocator external "
            "(the cpuset is explicit)"
        )
    if parameters.cpuset is None:
        raise InvalidInputError(f"opaque config: request {request!r}: cpuConfig.cpuset is missing")
    return parameters.cpuset


def placement_policy(
    configs: Sequence[OpaqueConfig], request: str, driver: str, threads_per_core: int
) -> Policy:
    """allocator cpumanager: the policy for `request` (the claim's config wins over the
    class's; defaults when neither sets one)."""
    matching = _placing(configs, request, driver)
    chosen = None
    for source in (FROM_CLAIM, FROM_CLASS):
        of_source = [c for c in matching if c.source == source]
        if len(of_source) > 1:
            raise InvalidInputError(
                f"opaque config: request {request!r} is targeted by {len(of_source)} "
                f"{source} configurations, at most 1 is allowed"
            )
        if of_source and chosen is None:
            chosen = of_source[0]
    if chosen is None:
        return Policy()
    parameters = parse_parameters(chosen.parameters)
    if parameters.cpuset is not None:
        raise InvalidInputError(
            "opaque config: cpuConfig.cpuset is only valid with allocator external"
        )
    config = parameters.cpu_config
    distribute = bool(config.distribute_across_numa)
    if config.group_size is not None and not distribute:
        raise InvalidInputError(
            "opaque config: cpuConfig.groupSize needs cpuConfig.distributeAcrossNUMA: true"
        )
    full = bool(config.full_pcpus_only)
    # The kubelet's group size: whole cores when only full physical cores may be used.
    group_size = config.group_size or (threads_per_core if full else 1)
    return Policy(
        strategy=config.strategy or "packed",
        align_uncore=True if config.align_uncore_cache is None else config.align_uncore_cache,
        full_pcpus_only=full,
        distribute_numa=distribute,
        group_size=group_size,
    )


def isolation_preference(
    configs: Sequence[OpaqueConfig], request: str, driver: str
) -> Isolation | None:
    """allocator cpumanager: `cpuConfig.isolated` of the config that sets the request's
    placement (the claim's over the class's); None when unset."""
    for source in (FROM_CLAIM, FROM_CLASS):
        of_source = [c for c in _placing(configs, request, driver) if c.source == source]
        if of_source:
            value = parse_parameters(of_source[0].parameters).cpu_config.isolated
            # parse_parameters refused any other value.
            return cast(Isolation | None, value)
    return None


def refuse_policy(configs: Sequence[OpaqueConfig], request: str, driver: str) -> None:
    """Individual mode: the scheduler chose the CPUs; any config for them is a mistake, except
    one that only sets the memory placement."""
    for config in _matching(configs, request, driver):
        if not memory_only(config):
            raise InvalidInputError(
                f"opaque config: request {request!r}: individual CPU devices take no "
                "configuration but cpuConfig.memoryPlacement (the scheduler chose the CPUs)"
            )


def memory_placement(
    configs: Sequence[OpaqueConfig], request: str, driver: str, default: MemoryPlacement
) -> MemoryPlacement:
    """`cpuConfig.memoryPlacement` for `request`: the claim's config over the class's (the
    first of either that sets it), else the driver's `default`."""
    matching = _matching(configs, request, driver)
    for source in (FROM_CLAIM, FROM_CLASS):
        for config in matching:
            if config.source != source:
                continue
            value = parse_parameters(config.parameters).cpu_config.memory_placement
            if value is not None:
                # parse_parameters refused any other value.
                return cast(MemoryPlacement, value)
    return default


def describe_policy(policy: Policy) -> str:
    """A compact spelling for records and logs, e.g. `spread+full-pcpus`."""
    parts: list[str] = [policy.strategy]
    if policy.full_pcpus_only:
        parts.append("full-pcpus")
    if policy.distribute_numa:
        parts.append(f"distribute-numa/{policy.group_size}")
    if not policy.align_uncore:
        parts.append("no-uncore-align")
    return "+".join(parts)
