"""The opaque configuration's schema (see `dracpu.allocator.domain.opaque`), validated by pydantic.

A module of its own so the allocator imports pydantic only when a claim carries a
configuration.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

# The placement policy fields of `CPUConfig` (attribute, as the schema spells it), in its order:
# all but `cpuset` and `memoryPlacement`.
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
    isolated: str | None = None
    # Where the container's memory comes from; not a placement policy field: it leaves the
    # CPUs alone, so it is valid in every mode.
    memory_placement: str | None = Field(default=None, alias="memoryPlacement")


class Parameters(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    api_version: str = Field(alias="apiVersion")
    cpu_config: CPUConfig = Field(alias="cpuConfig")
