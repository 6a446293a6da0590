"""The claim data model: what a prepared claim holds (`Allocation`, `ClaimRecord`, bound to an
`Owner` of dracpu.core.containers) and what a prepare asks for (`ResultInput`, `PrepareInput`,
which carries the claim's opaque configuration parsed, `dracpu.allocator.domain.opaque`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from dracpu.allocator.domain import opaque
from dracpu.core.containers import Owner
from dracpu.core.cpuset import CPUSet
from dracpu.core.driver import DRIVER_NAME


@dataclass(frozen=True, slots=True)
class Allocation:
    """What one allocation result of a claim received."""

    request: str
    pool: str
    device: str
    cpus: CPUSet
    count: int  # consumed CPU capacity; 0 for individual devices
    policy: str = ""

    @property
    def key(self) -> tuple[str, str, str, int]:
        return (self.request, self.pool, self.device, self.count)


@dataclass(frozen=True, slots=True)
class MemoryAmount:
    """What a claim holds of one NUMA node's memory device: `kind` is `memory` or
    `hugepages-<size>` (as the kubelet names the node resource), in bytes."""

    node: int
    kind: str
    bytes: int


@dataclass(frozen=True, slots=True)
class ClaimRecord:
    uid: str
    namespace: str
    name: str
    cpus: CPUSet
    allocations: tuple[Allocation, ...]
    prepared_at_ns: int
    owner: Owner | None = None
    container_id: str = ""  # the owner's running container, "" when none is known
    # Rebuilt from a CDI spec or a running container: the allocation results are unknown
    # until the kubelet prepares the claim again.
    recovered: bool = False
    # The claim's status.reservedFor pod UIDs, when the dra-plugin passed them (pods_known);
    # records of an older dra-plugin have none and bind the first container that attaches.
    pods: tuple[str, ...] = ()
    pods_known: bool = False
    # The NUMA nodes the claim's container takes its memory from (cpuset.mems), as a set of
    # node ids; empty when the claim's memory is not placed (every node).
    memory_nodes: CPUSet = field(default_factory=CPUSet)
    # The memory and hugepages its results took from memory devices, per NUMA node and kind;
    # records made before memory devices were allocatable have none.
    memory: tuple[MemoryAmount, ...] = ()
    # Its container runs on the shared pool too (`cpuConfig.sharedPool: include`); records
    # made before the field existed read as not.
    shares_pool: bool = False

    # The placements of its allocations, each once, in order (`packed; explicit`): worked out
    # when the record is made, so every reader (records, logs, replies) gets it as a field.
    policy: str = field(init=False, default="")

    def __post_init__(self) -> None:
        seen: list[str] = []
        for allocation in self.allocations:
            if allocation.policy and allocation.policy not in seen:
                seen.append(allocation.policy)
        object.__setattr__(self, "policy", "; ".join(seen))


@dataclass(frozen=True, slots=True)
class ResultInput:
    """One allocation result of the claim, as the dra-plugin passes it on."""

    request: str
    device: str
    pool: str = ""
    driver: str = DRIVER_NAME
    consumed: Mapping[str, str] = field(default_factory=dict)
    admin_access: bool = False


@dataclass(frozen=True, slots=True)
class PrepareInput:
    """One prepare of a claim: its allocation results, its opaque configuration as the claim
    lists it (`configs`) and parsed (`config`), and the pods it is reserved for."""

    uid: str
    namespace: str
    name: str
    results: tuple[ResultInput, ...]
    configs: tuple[opaque.OpaqueConfig, ...] = ()
    pods: tuple[str, ...] = ()
    pods_known: bool = False
    # `configs` parsed, as the wire translation does when the claim arrives; None (a request
    # built by hand) has them parsed when its prepare starts.
    config: opaque.ClaimConfig | None = None
