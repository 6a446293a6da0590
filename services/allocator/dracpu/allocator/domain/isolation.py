"""Placement around the kernel's isolated CPUs (`cpuConfig.isolated`), shared by the claim store
and `dracpu simulate`.

`require` takes only isolated CPUs and `avoid` only the others; both fail when too few are free.
`prefer` takes isolated CPUs first and the others only for what is missing. Unset (the default)
is the reverse: other CPUs first, isolated ones only for what is missing. So isolated CPUs stay
for the claims that ask for them, and a node whose free CPUs are all isolated still serves
every claim.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, get_args

from dracpu.core.cpuset import CPUSet
from dracpu.core.errors import InsufficientCPUsError

if TYPE_CHECKING:
    from dracpu.allocator.algorithm import Policy
    from dracpu.core.machine import Machine

Isolation = Literal["prefer", "require", "avoid"]
CHOICES: tuple[str, ...] = get_args(Isolation)


def take_with_isolation(
    machine: Machine,
    available: CPUSet,
    count: int,
    policy: Policy,
    isolation: Isolation | None,
) -> CPUSet:
    """`count` CPUs of `available`, placed by `policy` within the side `isolation` asks for."""
    # Imported here so `dracpu simulate --help` can name the choices without the algorithm.
    from dracpu.allocator.algorithm import take_cpus

    isolated = available & machine.isolated
    others = available - isolated
    if isolation == "require":
        if len(isolated) < count:
            raise InsufficientCPUsError(f"isolated CPUs required, {len(isolated)} of them free")
        return take_cpus(machine, isolated, count, policy)
    if isolation == "avoid":
        if len(others) < count:
            raise InsufficientCPUsError(f"isolated CPUs avoided, {len(others)} other CPUs free")
        return take_cpus(machine, others, count, policy)
    first = isolated if isolation == "prefer" else others
    if not first or first == available:
        return take_cpus(machine, available, count, policy)
    if len(first) >= count:
        try:
            return take_cpus(machine, first, count, policy)
        except InsufficientCPUsError:
            pass  # e.g. whole cores only and the preferred side has too few whole ones
    elif not policy.full_pcpus_only:
        # All of the preferred side, and only what is missing from the other one.
        return first | take_cpus(machine, available - first, count - len(first), policy)
    return take_cpus(machine, available, count, policy)
