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
claim's entries a `ClaimConfig` that travels with the prepare. The rules read only that value:
`request_config` answers, in one call, what the configuration asks of one result's CPUs. A
refusal is raised by the rule that first needs the entry, so a claim fails with the same words
at the same point of its prepare as if the entry were read there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, cast

from dracpu.allocator.algorithm import Policy
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

    @property
    def memory_only(self) -> bool:
        """Sets the memory placement and nothing else: it takes no part in choosing the CPUs,
        so the rules on how many configs may target a request leave it out."""
        return self.memory_placement is not None and self.cpuset is None and not self.policy_fields


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
        policy_fields=tuple(
            alias for name, alias in POLICY_FIELDS if getattr(config, name) is not None
        ),
    )


@dataclass(frozen=True, slots=True)
class ParsedConfig:
    """One opaque configuration entry of this driver, parsed when the claim arrived: its
    `parameters`, or (None) the words that refused them."""

    source: str
    requests: tuple[str, ...]
    parameters: ClaimParameters | None
    refusal: str = ""

    def checked(self) -> ClaimParameters:
        """The parameters; their refusal is raised where a rule first needs them."""
        if self.parameters is None:
            raise InvalidInputError(self.refusal)
        return self.parameters


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


def targets(config: ParsedConfig, request: str) -> bool:
    """Whether a config applies to a result's request (empty list = every request;
    `req/sub` results match configs naming `req`; resourceclaim.ConfigForResult)."""
    if not config.requests:
        return True
    return request in config.requests or request.split("/", 1)[0] in config.requests


def _matching(config: ClaimConfig, request: str) -> list[ParsedConfig]:
    matching = []
    for entry in config.entries:
        if not targets(entry, request):
            continue
        if entry.source not in (FROM_CLAIM, FROM_CLASS):
            raise InvalidInputError(
                f"opaque config: source {entry.source!r} is neither {FROM_CLAIM} nor {FROM_CLASS}"
            )
        matching.append(entry)
    return matching


def _placing(config: ClaimConfig, request: str) -> list[ParsedConfig]:
    return [c for c in _matching(config, request) if not c.checked().memory_only]


def explicit_cpuset(config: ClaimConfig, request: str) -> CPUSet:
    """allocator external: the cpuset of the one claim config that targets `request`."""
    matching = _placing(config, request)
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
    parameters = matching[0].checked()
    extra = parameters.policy_fields
    if extra:
        raise InvalidInputError(
            f"opaque config: cpuConfig.{extra[0]} is not valid with allocator external "
            "(the cpuset is explicit)"
        )
    if parameters.cpuset is None:
        raise InvalidInputError(f"opaque config: request {request!r}: cpuConfig.cpuset is missing")
    return parameters.cpuset


def _placing_entry(config: ClaimConfig, request: str) -> ParsedConfig | None:
    """The config that sets the request's placement: the claim's over the class's, at most one
    of each."""
    matching = _placing(config, request)
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
    return chosen


def placement_policy(config: ClaimConfig, request: str, threads_per_core: int) -> Policy:
    """allocator cpumanager: the policy for `request` (the claim's config wins over the
    class's; defaults when neither sets one)."""
    chosen = _placing_entry(config, request)
    if chosen is None:
        return Policy()
    parameters = chosen.checked()
    if parameters.cpuset is not None:
        raise InvalidInputError(
            "opaque config: cpuConfig.cpuset is only valid with allocator external"
        )
    distribute = bool(parameters.distribute_across_numa)
    if parameters.group_size is not None and not distribute:
        raise InvalidInputError(
            "opaque config: cpuConfig.groupSize needs cpuConfig.distributeAcrossNUMA: true"
        )
    full = bool(parameters.full_pcpus_only)
    # The kubelet's group size: whole cores when only full physical cores may be used.
    group_size = parameters.group_size or (threads_per_core if full else 1)
    align = parameters.align_uncore_cache
    return Policy(
        strategy=parameters.strategy or "packed",
        align_uncore=True if align is None else align,
        full_pcpus_only=full,
        distribute_numa=distribute,
        group_size=group_size,
    )


def isolation_preference(config: ClaimConfig, request: str) -> Isolation | None:
    """allocator cpumanager: `cpuConfig.isolated` of the config that sets the request's
    placement (the claim's over the class's); None when unset."""
    for source in (FROM_CLAIM, FROM_CLASS):
        of_source = [c for c in _placing(config, request) if c.source == source]
        if of_source:
            return of_source[0].checked().isolated
    return None


def refuse_policy(config: ClaimConfig, request: str) -> None:
    """Individual mode: the scheduler chose the CPUs; any config for them is a mistake, except
    one that only sets the memory placement."""
    for entry in _matching(config, request):
        if not entry.checked().memory_only:
            raise InvalidInputError(
                f"opaque config: request {request!r}: individual CPU devices take no "
                "configuration but cpuConfig.memoryPlacement (the scheduler chose the CPUs)"
            )


def memory_placement(
    config: ClaimConfig, request: str, default: MemoryPlacement
) -> MemoryPlacement:
    """`cpuConfig.memoryPlacement` for `request`: the claim's config over the class's (the
    first of either that sets it), else the driver's `default`."""
    matching = _matching(config, request)
    for source in (FROM_CLAIM, FROM_CLASS):
        for entry in matching:
            if entry.source != source:
                continue
            value = entry.checked().memory_placement
            if value is not None:
                return value
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


@dataclass(frozen=True, slots=True)
class RequestConfig:
    """What the claim's configuration asks of one result's CPUs."""

    memory: MemoryPlacement  # the config's memory placement, else the driver's
    cpuset: CPUSet | None = None  # chosen by the claim: the CPUs it names
    policy: Policy = field(default_factory=Policy)  # chosen by the driver: how it places them
    isolation: Isolation | None = None  # chosen by the driver: which side of the isolated CPUs
    # The placement as records and logs spell it: "" for the scheduler's own choice,
    # `explicit` for the claim's cpuset, the policy (`spread+full-pcpus+isolated-prefer`).
    described: str = ""


def request_config(
    config: ClaimConfig,
    request: str,
    chooser: Chooser,
    threads_per_core: int,
    default_memory: MemoryPlacement,
) -> RequestConfig:
    """Every rule of the configuration for one result's `request`, in one call: the refusal
    of the first rule it breaks, or what it asks for when `chooser` chooses the CPUs."""
    if chooser == "scheduler":
        refuse_policy(config, request)
        return RequestConfig(memory_placement(config, request, default_memory))
    if chooser == "claim":
        cpuset = explicit_cpuset(config, request)
        memory = memory_placement(config, request, default_memory)
        return RequestConfig(memory, cpuset=cpuset, described="explicit")
    policy = placement_policy(config, request, threads_per_core)
    described = describe_policy(policy)
    isolation = isolation_preference(config, request)
    if isolation:
        described = f"{described}+isolated-{isolation}"
    memory = memory_placement(config, request, default_memory)
    return RequestConfig(memory, policy=policy, isolation=isolation, described=described)
