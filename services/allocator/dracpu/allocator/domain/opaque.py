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
| `cpuConfig.sharedPool`           | include / exclude | the shared pool too, or the claim's only |

`isolated` is explained in `dracpu.allocator.domain.isolation` (unset: other CPUs first).
`memoryPlacement` (unset: the driver's `memoryPlacement`) and `sharedPool`
(`dracpu.allocator.domain.shared_pool`; unset: `exclude`) leave the choice of the CPUs alone,
so they are accepted in every mode, next to an explicit cpuset and on individual devices too.

Unknown fields and values are refused, so a typo never silently changes a placement. The
checks that need no node (the shape checks below, and the rules of
`dracpu.allocator.claims.admission`) are also the chart's admission policy, generated from the
same schema (`dracpu.allocator.domain.opaque_cel`), and `dracpu validate`: a wrong
configuration is refused at `kubectl apply` in the words the prepare would use.

The configuration is parsed once, when the allocator receives the claim (`parse_configs`, in
the wire translation of its PrepareRequest): every entry of this driver becomes a
`ParsedConfig` holding its typed `ClaimParameters`, or the words that refused them, and the
claim's entries a `ClaimConfig` that travels with the prepare. The rules that read it, where
the node's facts are known, are `dracpu.allocator.claims.rules`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from dracpu.allocator.domain import opaque_words as words
from dracpu.allocator.domain.isolation import Isolation
from dracpu.allocator.domain.shared_pool import SharedPool
from dracpu.core.config import MemoryPlacement
from dracpu.core.cpuset import MAX_CPUS, CPUSet
from dracpu.core.documents import load_json
from dracpu.core.driver import DRIVER_NAME
from dracpu.core.errors import InvalidInputError

if TYPE_CHECKING:
    from dracpu.allocator.domain.opaque_schema import FieldSpec

FROM_CLAIM = "FromClaim"
FROM_CLASS = "FromClass"
# The kinds whose objects carry opaque configurations: their resource, and where they list
# their device configurations.
CONFIG_PATHS: dict[str, tuple[str, tuple[str, ...]]] = {
    "ResourceClaim": ("resourceclaims", ("spec", "devices", "config")),
    "ResourceClaimTemplate": ("resourceclaimtemplates", ("spec", "spec", "devices", "config")),
    "DeviceClass": ("deviceclasses", ("spec", "config")),
}

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
    shared_pool: SharedPool | None = None
    # The placement policy fields it sets, as the schema spells them, in the schema's order.
    policy_fields: tuple[str, ...] = ()
    # Sets only fields that leave the choice of the CPUs alone (the memory placement, the
    # shared pool): it takes no part in choosing them, so the rules on how many configs may
    # target a request leave it out.
    leaves_cpus: bool = False


def parse_parameters(raw: bytes) -> ClaimParameters:
    document = load_json(raw or b"null", "opaque config")
    # The schema library loads with the first claim that carries a configuration.
    from pydantic import ValidationError

    from dracpu.allocator.domain.opaque_schema import POLICY_FIELDS, Parameters

    refused = shape_refusal(document)
    if refused:
        raise InvalidInputError(refused)
    try:
        parsed = Parameters.model_validate(document)
    except ValidationError as exc:  # the checks above let through only what the schema takes
        first = exc.errors()[0]
        location = ".".join(str(p) for p in first["loc"])
        raise InvalidInputError(f"opaque config: field {location!r}: {first['msg']}") from None
    config = parsed.cpu_config
    cpuset = None if config.cpuset is None else CPUSet.parse(config.cpuset)  # checked above
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
        isolated=config.isolated,
        memory_placement=config.memory_placement,
        shared_pool=config.shared_pool,
        policy_fields=policy_fields,
        leaves_cpus=(
            (config.memory_placement is not None or config.shared_pool is not None)
            and cpuset is None
            and not policy_fields
        ),
    )


# ---- the shape the schema allows ---------------------------------------------------------------
#
# Checked before the parameters are typed, in this order, which the admission policy generated
# from the same schema (`dracpu.allocator.domain.opaque_cel`) keeps, so both name the same field
# first: the parameters are an object; `apiVersion`; unknown top-level keys; `cpuConfig` present
# and an object; unknown keys of `cpuConfig`; each field's type and values, in the schema's
# order; the cpuset's syntax. Of several unknown keys the first in code point order is named.
# The schema's fields (`opaque_schema.PARAMETERS`, `CPU_CONFIG`) are read with pydantic, only
# when a configuration is parsed.

API_VERSION_KEY = "apiVersion"
CPU_CONFIG_KEY = "cpuConfig"  # the schema's one object
CPUSET_KEY = "cpuset"
# A cpuset's syntax as `dracpu.core.cpuset.CPUSet.parse` reads it: items between commas, each
# a number or a range low-high, blanks around them; numbers of at most six digits. The
# patterns are RE2 too: the admission policy matches with them.
BLANK_PATTERN = "[ \\t\\n]*"
ITEM_PATTERN = "[ \\t\\n]*[0-9]+(-[0-9]+)?[ \\t\\n]*"
NUMBER_PATTERN = "[0-9]+"
MAX_DIGITS = 6


def fits(spec: FieldSpec, value: object) -> bool:
    """Whether a (non-null) value is of the field's kind and among its allowed values."""
    if spec.kind == "boolean":
        return isinstance(value, bool)
    if spec.kind == "integer":
        if isinstance(value, bool) or not isinstance(value, int):
            return False
        return spec.minimum is None or value >= spec.minimum
    if spec.kind == "string":
        return isinstance(value, str)
    if spec.kind == "enum":
        return isinstance(value, str) and value in spec.choices
    return isinstance(value, dict)


def wrong_value(spec: FieldSpec, field: str, value: str) -> str:
    """The refusal of a value (shown) that does not fit the field."""
    if spec.kind == "boolean":
        return words.not_a_boolean(field, value)
    if spec.kind == "integer":
        return words.not_an_integer(field, value, spec.minimum)
    if spec.kind == "string":
        return words.not_a_string(field, value)
    if spec.kind == "enum":
        return words.not_one_of(field, value, spec.choices)
    return words.not_an_object(field, value)


def unknown_key(document: Mapping[str, object], specs: Sequence[FieldSpec], within: str) -> str:
    """The refusal of the first key the schema does not know, or "" when there is none."""
    known = [spec.key for spec in specs]
    unknown = sorted(key for key in document if key not in known)
    if not unknown:
        return ""
    prefix = f"{within}." if within else ""
    near = words.nearest(unknown[0], known)
    hint = words.did_you_mean(prefix + near) if near else words.known_fields(within, known)
    return words.unknown_field(prefix + words.cut(unknown[0]), hint)


def cpuset_refusal(text: str) -> str:
    """The refusal of a cpuset that `CPUSet.parse` refuses (or reads as no CPU), naming its
    first bad item, or ""."""
    if re.fullmatch(BLANK_PATTERN, text):
        return words.empty_cpuset()
    whole = words.shown(text)
    for item in text.split(","):
        shown = words.shown(item)
        if re.fullmatch(BLANK_PATTERN, item):
            return words.empty_item(whole)
        if not re.fullmatch(ITEM_PATTERN, item):
            return words.invalid_item(shown, whole)
        bounds = re.findall(NUMBER_PATTERN, item)
        if any(len(bound) > MAX_DIGITS for bound in bounds):
            return words.beyond_last_cpu(shown, whole, MAX_CPUS - 1)
        if int(bounds[0]) > int(bounds[-1]):
            return words.reversed_range(shown, whole)
        if int(bounds[-1]) >= MAX_CPUS:
            return words.beyond_last_cpu(shown, whole, MAX_CPUS - 1)
    return ""


def shape_refusal(document: object) -> str:
    """Why the parameters (parsed JSON) are refused before they are typed, or "" when their
    shape is what the schema allows."""
    from dracpu.allocator.domain.opaque_schema import CPU_CONFIG, PARAMETERS

    if not isinstance(document, dict):
        return words.parameters_not_an_object()
    if API_VERSION_KEY not in document:
        return words.missing_api_version()
    version = document[API_VERSION_KEY]
    if not isinstance(version, str) or version != words.API_VERSION:
        return words.unsupported_api_version(words.shown(version))
    unknown = unknown_key(document, PARAMETERS, "")
    if unknown:
        return unknown
    if CPU_CONFIG_KEY not in document:
        return words.missing_field(CPU_CONFIG_KEY)
    config = document[CPU_CONFIG_KEY]
    if not isinstance(config, dict):
        return words.not_an_object(CPU_CONFIG_KEY, words.shown(config))
    unknown = unknown_key(config, CPU_CONFIG, CPU_CONFIG_KEY)
    if unknown:
        return unknown
    for spec in CPU_CONFIG:
        value = config.get(spec.key)
        if value is not None and not fits(spec, value):
            return wrong_value(spec, f"{CPU_CONFIG_KEY}.{spec.key}", words.shown(value))
    cpuset = config.get(CPUSET_KEY)
    return "" if cpuset is None else cpuset_refusal(cpuset)


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
