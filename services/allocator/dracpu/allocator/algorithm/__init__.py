"""Topology-aware CPU assignment (the kubelet CPU Manager's algorithm), pure functions.

Public surface: `Policy` and `take_cpus`. The naive body below is replaced by the faithful
implementation; the signature is the contract the claim store relies on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from dracpu.core.cpuset import CPUSet
from dracpu.core.errors import InsufficientCPUsError, InvalidInputError
from dracpu.core.machine import Machine


@dataclass(frozen=True, slots=True)
class Policy:
    """How CPUs are picked for one request."""

    strategy: Literal["packed", "spread"] = "packed"
    align_uncore: bool = True
    full_pcpus_only: bool = False
    distribute_numa: bool = False
    group_size: int = 1


def take_cpus(machine: Machine, available: CPUSet, count: int, policy: Policy = Policy()) -> CPUSet:
    """Pick `count` CPUs out of `available` on `machine`.

    Raises InvalidInputError for a malformed request and InsufficientCPUsError when it cannot
    be met. The result is always a subset of `available` of exactly `count` CPUs.
    """
    if count <= 0:
        raise InvalidInputError(f"CPU count must be positive, got {count}")
    free = available & machine.cpu_set
    if len(free) < count:
        raise InsufficientCPUsError(f"not enough CPUs available: want {count}, have {len(free)}")
    return CPUSet(free.sorted()[:count])
