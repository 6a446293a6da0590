"""The node's allocation state and the rules that change it, as pure functions.

`model` (owners, claim records, prepare inputs), `state` (the immutable `NodeState` and its
reads: the exclusive CPUs, the shared pool and its floor, the CPUs withheld from the devices),
`ownership` (who may use a claim), `allocations` (the CPUs of a claim's results), `memory`
(the NUMA node memory and hugepages its memory results take), `preparation` (prepare,
unprepare) and `containers` (attach, detach, adopt). The names callers use are all here.
"""

from __future__ import annotations

from dracpu.allocator.claims.allocations import allocate
from dracpu.allocator.claims.containers import (
    MAX_QUARANTINED,
    AdoptOutcome,
    AdoptResult,
    AttachOutcome,
    adopt,
    attach,
    detach,
    parse_claim_cpus,
    running_containers,
)
from dracpu.allocator.claims.model import (
    Allocation,
    ClaimRecord,
    PrepareInput,
    ResultInput,
)
from dracpu.allocator.claims.preparation import PrepareOutcome, prepare, unprepare
from dracpu.allocator.claims.state import (
    NodeState,
    Summary,
    accounted,
    list_claims,
    offline_claims,
    retopologize,
    shortfall,
    summary,
)
from dracpu.core.containers import Container, Owner

__all__ = [
    "MAX_QUARANTINED",
    "AdoptOutcome",
    "AdoptResult",
    "Allocation",
    "AttachOutcome",
    "ClaimRecord",
    "Container",
    "NodeState",
    "Owner",
    "PrepareInput",
    "PrepareOutcome",
    "ResultInput",
    "Summary",
    "accounted",
    "adopt",
    "allocate",
    "attach",
    "detach",
    "list_claims",
    "offline_claims",
    "parse_claim_cpus",
    "prepare",
    "retopologize",
    "running_containers",
    "shortfall",
    "summary",
    "unprepare",
]
