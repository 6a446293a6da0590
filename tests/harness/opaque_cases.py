"""One table of `dra.cpu` opaque parameters and what becomes of them, whoever reads them.

Every case is run against the driver's parser and rules (tests/allocator/test_opaque_admission.py,
and `dracpu validate`) and against a real API server holding the chart's admission policy
(tests/controlplane/test_cp_opaque_admission.py): each must give the same verdict, and a
refusal must name the same field first, in the same words.

`field` is the field a refusal names first (`named_field`); None for parameters every node's
prepare accepts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

API_VERSION = "v1alpha1"


@dataclass(frozen=True)
class OpaqueCase:
    id: str
    parameters: Any
    field: str | None = None

    @property
    def valid(self) -> bool:
        return self.field is None


def config(**fields: Any) -> dict[str, Any]:
    """Parameters of apiVersion v1alpha1 with these cpuConfig fields."""
    return {"apiVersion": API_VERSION, "cpuConfig": fields}


VALID = (
    OpaqueCase("no-placement-field", config()),
    OpaqueCase("spread-over-cores", config(strategy="spread")),
    OpaqueCase("whole-cores-packed", config(strategy="packed", fullPCPUsOnly=True)),
    OpaqueCase("across-numa-in-groups", config(distributeAcrossNUMA=True, groupSize=4)),
    OpaqueCase(
        "every-policy-field",
        config(
            strategy="packed",
            fullPCPUsOnly=True,
            distributeAcrossNUMA=True,
            groupSize=2,
            alignUncoreCache=False,
            isolated="prefer",
            memoryPlacement="local",
            sharedPool="include",
        ),
    ),
    OpaqueCase("isolated-required", config(isolated="require")),
    OpaqueCase("memory-placement-only", config(memoryPlacement="none")),
    OpaqueCase("shared-pool-included", config(sharedPool="include")),
    OpaqueCase("shared-pool-excluded", config(sharedPool="exclude")),
    OpaqueCase("cpuset-with-shared-pool", config(cpuset="0-1", sharedPool="include")),
    OpaqueCase("a-null-field-is-unset", config(strategy=None, groupSize=None)),
    OpaqueCase("explicit-cpuset", config(cpuset="4-5,24-25")),
    OpaqueCase("cpuset-with-blanks", config(cpuset=" 0-3, 8 ")),
    OpaqueCase("cpuset-with-memory-placement", config(cpuset="0", memoryPlacement="local")),
    OpaqueCase("cpuset-with-null-policy-fields", config(cpuset="2", strategy=None)),
)

INVALID = (
    # apiVersion
    OpaqueCase("api-version-v1", {"apiVersion": "v1", "cpuConfig": {}}, "apiVersion"),
    OpaqueCase("api-version-missing", {"cpuConfig": {}}, "apiVersion"),
    OpaqueCase("api-version-a-number", {"apiVersion": 1, "cpuConfig": {}}, "apiVersion"),
    # cpuConfig
    OpaqueCase("cpu-config-missing", {"apiVersion": API_VERSION}, "cpuConfig"),
    OpaqueCase("cpu-config-a-string", {"apiVersion": API_VERSION, "cpuConfig": "spread"},
               "cpuConfig"),
    OpaqueCase("cpu-config-null", {"apiVersion": API_VERSION, "cpuConfig": None}, "cpuConfig"),
    # unknown keys
    OpaqueCase("top-level-key-in-the-wrong-case", {"apiVersion": API_VERSION, "cpuconfig": {}},
               "cpuconfig"),
    OpaqueCase("top-level-key-unknown", {**config(), "kind": "CPUConfig"}, "kind"),
    OpaqueCase("strategy-misspelt", config(stratgy="spread"), "cpuConfig.stratgy"),
    OpaqueCase("full-pcpus-in-the-wrong-case", config(fullPcpusOnly=True),
               "cpuConfig.fullPcpusOnly"),
    OpaqueCase("memory-placement-misspelt", config(memoryPlacment="local"),
               "cpuConfig.memoryPlacment"),
    OpaqueCase("key-near-no-known-key", config(colour="blue"), "cpuConfig.colour"),
    OpaqueCase("two-unknown-keys-name-the-first", config(zeta=1, alpha=2), "cpuConfig.alpha"),
    OpaqueCase("unknown-key-before-a-wrong-value", config(fullPCPUsOnly="yes", stratgy=1),
               "cpuConfig.stratgy"),
    # types and values
    OpaqueCase("strategy-outside-its-values", config(strategy="zigzag"), "cpuConfig.strategy"),
    OpaqueCase("strategy-in-the-wrong-case", config(strategy="Spread"), "cpuConfig.strategy"),
    OpaqueCase("strategy-a-number", config(strategy=1), "cpuConfig.strategy"),
    OpaqueCase("full-pcpus-a-string", config(fullPCPUsOnly="yes"), "cpuConfig.fullPCPUsOnly"),
    OpaqueCase("distribute-a-number", config(distributeAcrossNUMA=1),
               "cpuConfig.distributeAcrossNUMA"),
    OpaqueCase("align-uncore-a-string", config(alignUncoreCache="false"),
               "cpuConfig.alignUncoreCache"),
    OpaqueCase("align-uncore-a-list", config(alignUncoreCache=[True]),
               "cpuConfig.alignUncoreCache"),
    OpaqueCase("isolated-outside-its-values", config(isolated="always"), "cpuConfig.isolated"),
    OpaqueCase("isolated-a-boolean", config(isolated=True), "cpuConfig.isolated"),
    OpaqueCase("memory-placement-outside-its-values", config(memoryPlacement="strict"),
               "cpuConfig.memoryPlacement"),
    OpaqueCase("memory-placement-an-object", config(memoryPlacement={"node": 0}),
               "cpuConfig.memoryPlacement"),
    OpaqueCase("shared-pool-outside-its-values", config(sharedPool="both"),
               "cpuConfig.sharedPool"),
    OpaqueCase("shared-pool-in-the-wrong-case", config(sharedPool="Include"),
               "cpuConfig.sharedPool"),
    OpaqueCase("shared-pool-a-boolean", config(sharedPool=True), "cpuConfig.sharedPool"),
    OpaqueCase("shared-pool-misspelt", config(sharedpool="include"), "cpuConfig.sharedpool"),
    # groupSize
    OpaqueCase("group-size-zero", config(distributeAcrossNUMA=True, groupSize=0),
               "cpuConfig.groupSize"),
    OpaqueCase("group-size-negative", config(distributeAcrossNUMA=True, groupSize=-2),
               "cpuConfig.groupSize"),
    OpaqueCase("group-size-a-decimal", config(distributeAcrossNUMA=True, groupSize=2.0),
               "cpuConfig.groupSize"),
    OpaqueCase("group-size-a-string", config(distributeAcrossNUMA=True, groupSize="2"),
               "cpuConfig.groupSize"),
    OpaqueCase("group-size-a-boolean", config(distributeAcrossNUMA=True, groupSize=True),
               "cpuConfig.groupSize"),
    OpaqueCase("group-size-without-distribute", config(groupSize=2), "cpuConfig.groupSize"),
    OpaqueCase("group-size-with-distribute-off", config(distributeAcrossNUMA=False, groupSize=2),
               "cpuConfig.groupSize"),
    OpaqueCase("spread-with-whole-cores", config(strategy="spread", fullPCPUsOnly=True),
               "cpuConfig.strategy"),
    # cpuset
    OpaqueCase("cpuset-a-number", config(cpuset=3), "cpuConfig.cpuset"),
    OpaqueCase("cpuset-empty", config(cpuset=""), "cpuConfig.cpuset"),
    OpaqueCase("cpuset-blank", config(cpuset=" \t"), "cpuConfig.cpuset"),
    OpaqueCase("cpuset-with-a-letter", config(cpuset="0-3,a"), "cpuConfig.cpuset"),
    OpaqueCase("cpuset-reversed-range", config(cpuset="5-2"), "cpuConfig.cpuset"),
    OpaqueCase("cpuset-empty-item", config(cpuset="0,,2"), "cpuConfig.cpuset"),
    OpaqueCase("cpuset-trailing-comma", config(cpuset="0-3,"), "cpuConfig.cpuset"),
    OpaqueCase("cpuset-blank-inside-a-range", config(cpuset="0 - 3"), "cpuConfig.cpuset"),
    OpaqueCase("cpuset-beyond-the-maximum", config(cpuset="0-65536"), "cpuConfig.cpuset"),
    OpaqueCase("cpuset-of-seven-digits", config(cpuset="0000001"), "cpuConfig.cpuset"),
    OpaqueCase("cpuset-with-strategy", config(cpuset="0-1", strategy="packed"),
               "cpuConfig.strategy"),
    OpaqueCase("cpuset-with-group-size", config(cpuset="0-1", groupSize=2),
               "cpuConfig.groupSize"),
    OpaqueCase("cpuset-with-isolated", config(cpuset="0-1", memoryPlacement="local",
                                              isolated="avoid"), "cpuConfig.isolated"),
)  # fmt: skip

CASES = VALID + INVALID

# The first field a refusal names: the one an unknown or missing field's words quote, the
# apiVersion, or the field the message starts with.
_NAMED = (
    re.compile(r"opaque config: (?:unknown|missing) field '([^']+)'"),
    re.compile(r"opaque config: unsupported (apiVersion)"),
    re.compile(r"opaque config: ([A-Za-z][\w.]*)"),
)


def named_field(message: str) -> str | None:
    """The field a refusal names first, None for no refusal ("")."""
    if not message:
        return None
    for pattern in _NAMED:
        found = pattern.search(message)
        if found:
            return found.group(1)
    raise AssertionError(f"no field named in {message!r}")
