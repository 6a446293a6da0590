"""What a claim's opaque configuration asks of one result's CPUs (`request_config`), read
from the configuration as it was parsed when the claim arrived
(`dracpu.allocator.domain.opaque.ClaimConfig`), where the node's facts are known: who chooses
the CPUs, the threads of a core, the driver's memory placement.

An entry whose parameters were refused fails the prepare here, in the rule that first needs
it, so a claim fails with the same words at the same point of its prepare as if the entry
were read there; an entry no rule reads (one for another request) is never refused.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TypeVar

from dracpu.allocator.algorithm import Policy
from dracpu.allocator.domain import opaque_words as words
from dracpu.allocator.domain.isolation import Isolation
from dracpu.allocator.domain.opaque import (
    FROM_CLAIM,
    FROM_CLASS,
    Chooser,
    ClaimConfig,
    ClaimParameters,
    ParsedConfig,
)
from dracpu.allocator.domain.shared_pool import DEFAULT as DEFAULT_SHARED_POOL
from dracpu.core.config import MemoryPlacement
from dracpu.core.cpuset import CPUSet
from dracpu.core.errors import InvalidInputError

T = TypeVar("T")


def _checked(entry: ParsedConfig) -> ClaimParameters:
    """The entry's parameters; their refusal is raised where a rule first needs them."""
    if entry.parameters is None:
        raise InvalidInputError(entry.refusal)
    return entry.parameters


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
    return [c for c in _matching(config, request) if not _checked(c).leaves_cpus]


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
    parameters = _checked(matching[0])
    extra = parameters.policy_fields
    if extra:
        raise InvalidInputError(words.not_with_external(extra[0]))
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
    parameters = _checked(chosen)
    if parameters.cpuset is not None:
        raise InvalidInputError(
            "opaque config: cpuConfig.cpuset is only valid with allocator external"
        )
    distribute = bool(parameters.distribute_across_numa)
    if parameters.group_size is not None and not distribute:
        raise InvalidInputError(words.group_size_without_distribute())
    full = bool(parameters.full_pcpus_only)
    if parameters.strategy == "spread" and full:
        raise InvalidInputError(words.spread_with_full_pcpus())
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
            return _checked(of_source[0]).isolated
    return None


def refuse_policy(config: ClaimConfig, request: str) -> None:
    """Individual mode: the scheduler chose the CPUs; any config for them is a mistake, except
    one that only sets the memory placement or the shared pool."""
    for entry in _matching(config, request):
        if not _checked(entry).leaves_cpus:
            raise InvalidInputError(
                f"opaque config: request {request!r}: individual CPU devices take no "
                "configuration but cpuConfig.memoryPlacement and cpuConfig.sharedPool (the "
                "scheduler chose the CPUs)"
            )


def memory_placement(
    config: ClaimConfig, request: str, default: MemoryPlacement
) -> MemoryPlacement:
    """`cpuConfig.memoryPlacement` for `request`: the claim's config over the class's (the
    first of either that sets it), else the driver's `default`."""
    value: MemoryPlacement | None = _first_set(config, request, lambda c: c.memory_placement)
    return default if value is None else value


def includes_pool(config: ClaimConfig, request: str) -> bool:
    """`cpuConfig.sharedPool` for `request` is `include`: the claim's config over the class's
    (the first of either that sets it); unset is `exclude`."""
    value = _first_set(config, request, lambda c: c.shared_pool)
    return (DEFAULT_SHARED_POOL if value is None else value) == "include"


def _first_set(
    config: ClaimConfig, request: str, read: Callable[[ClaimParameters], T | None]
) -> T | None:
    """The first value `read` finds set for `request`, the claim's entries before the class's."""
    matching = _matching(config, request)
    for source in (FROM_CLAIM, FROM_CLASS):
        for entry in matching:
            if entry.source != source:
                continue
            value = read(_checked(entry))
            if value is not None:
                return value
    return None


def shared_pool(config: ClaimConfig, requests: Iterable[str]) -> bool:
    """Whether the claim's container runs on the shared pool too: some result's request
    includes it. One container has one cpuset, so one result asking for the pool gives it to
    the container of all the claim's CPUs."""
    return any(includes_pool(config, request) for request in requests)


def describe_policy(policy: Policy) -> str:
    """A compact spelling for records and logs, e.g. `packed+full-pcpus`."""
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
    # `explicit` for the claim's cpuset, the policy (`packed+full-pcpus+isolated-prefer`).
    described: str = ""
    shared_pool: bool = False  # `cpuConfig.sharedPool: include`


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
        memory = memory_placement(config, request, default_memory)
        return RequestConfig(memory, shared_pool=includes_pool(config, request))
    if chooser == "claim":
        cpuset = explicit_cpuset(config, request)
        memory = memory_placement(config, request, default_memory)
        shared = includes_pool(config, request)
        return RequestConfig(memory, cpuset=cpuset, described="explicit", shared_pool=shared)
    policy = placement_policy(config, request, threads_per_core)
    described = describe_policy(policy)
    isolation = isolation_preference(config, request)
    if isolation:
        described = f"{described}+isolated-{isolation}"
    memory = memory_placement(config, request, default_memory)
    return RequestConfig(
        memory,
        policy=policy,
        isolation=isolation,
        described=described,
        shared_pool=includes_pool(config, request),
    )
