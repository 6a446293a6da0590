"""The opaque configuration's schema (see `dracpu.allocator.domain.opaque`), validated by pydantic.

A module of its own so the allocator imports pydantic only when a claim carries a
configuration.

`PARAMETERS` and `CPU_CONFIG` describe the models' fields as the checks of
`dracpu.allocator.domain.opaque` read them: the key, the JSON kind, the allowed values.
They are read from the models, so the checks in Python and the chart's admission policy, which
is generated from them (`dracpu.allocator.domain.opaque_cel`), follow any change of the models.
"""

from __future__ import annotations

import types
from dataclasses import dataclass
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field
from pydantic.fields import FieldInfo

from dracpu.allocator.domain.isolation import Isolation
from dracpu.allocator.domain.shared_pool import SharedPool
from dracpu.core.config import MemoryPlacement

# The placement policy fields of `CPUConfig` (attribute, as the schema spells it), in its order:
# all but `cpuset`, `memoryPlacement` and `sharedPool`.
POLICY_FIELDS: tuple[tuple[str, str], ...] = (
    ("strategy", "strategy"),
    ("full_pcpus_only", "fullPCPUsOnly"),
    ("distribute_across_numa", "distributeAcrossNUMA"),
    ("group_size", "groupSize"),
    ("align_uncore_cache", "alignUncoreCache"),
    ("isolated", "isolated"),
)


class CPUConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    cpuset: str | None = None
    strategy: Literal["packed", "spread"] | None = None
    full_pcpus_only: bool | None = Field(default=None, alias="fullPCPUsOnly")
    distribute_across_numa: bool | None = Field(default=None, alias="distributeAcrossNUMA")
    group_size: int | None = Field(default=None, alias="groupSize", ge=1)
    align_uncore_cache: bool | None = Field(default=None, alias="alignUncoreCache")
    isolated: Isolation | None = None
    # Where the container's memory comes from; not a placement policy field: it leaves the
    # CPUs alone, so it is valid in every mode.
    memory_placement: MemoryPlacement | None = Field(default=None, alias="memoryPlacement")
    # Whether the claimed container also runs on the shared pool; not a placement policy
    # field either: the claim's CPUs are chosen as without it.
    shared_pool: SharedPool | None = Field(default=None, alias="sharedPool")


class Parameters(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    api_version: str = Field(alias="apiVersion")
    cpu_config: CPUConfig = Field(alias="cpuConfig")


Kind = Literal["boolean", "integer", "string", "enum", "object"]


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """One field of a model as the checks read it."""

    key: str  # as the parameters spell it
    kind: Kind
    required: bool = False
    choices: tuple[str, ...] = ()  # kind enum: the allowed values, in the schema's order
    minimum: int | None = None  # kind integer: the least value allowed


def _kind(annotation: Any) -> tuple[Kind, tuple[str, ...]]:
    if get_origin(annotation) is Literal:
        return "enum", tuple(str(choice) for choice in get_args(annotation))
    if annotation is bool:
        return "boolean", ()
    if annotation is int:
        return "integer", ()
    if annotation is str:
        return "string", ()
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "object", ()
    raise TypeError(f"no JSON kind for the schema's type {annotation!r}")


def _spec(name: str, info: FieldInfo) -> FieldSpec:
    annotation = info.annotation
    if get_origin(annotation) in (Union, types.UnionType):
        # `X | None`: null is the field left unset.
        (annotation,) = [arg for arg in get_args(annotation) if arg is not type(None)]
    kind, choices = _kind(annotation)
    # `Field(ge=...)` is an annotated_types.Ge among the field's metadata.
    minimum = next((m.ge for m in info.metadata if isinstance(getattr(m, "ge", None), int)), None)
    return FieldSpec(info.alias or name, kind, info.is_required(), choices, minimum)


def field_specs(model: type[BaseModel]) -> tuple[FieldSpec, ...]:
    """The model's fields, in its order."""
    return tuple(_spec(name, info) for name, info in model.model_fields.items())


PARAMETERS = field_specs(Parameters)
CPU_CONFIG = field_specs(CPUConfig)
