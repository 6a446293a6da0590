"""`take_cpus`: validate a request, run the kubelet's take for the policy, enforce whole cores."""

from __future__ import annotations

from dracpu.allocator.algorithm.distributed import take_distributed
from dracpu.allocator.algorithm.packed import take_packed
from dracpu.allocator.algorithm.policy import Policy
from dracpu.allocator.algorithm.topology_index import TopologyIndex, index_for
from dracpu.core.cpuset import CPUSet
from dracpu.core.errors import InsufficientCPUsError, InvalidInputError
from dracpu.core.machine import Machine

DEFAULT_POLICY = Policy()


def take_cpus(
    machine: Machine, available: CPUSet, count: int, policy: Policy = DEFAULT_POLICY
) -> CPUSet:
    """Pick `count` CPUs out of `available` on `machine`.

    Raises InvalidInputError for a malformed request and InsufficientCPUsError when it cannot
    be met. The result is always a subset of `available` of exactly `count` CPUs.
    """
    if isinstance(count, bool) or not isinstance(count, int):
        raise InvalidInputError(f"CPU count must be an integer, got {count!r}")
    if count <= 0:
        raise InvalidInputError(f"CPU count must be positive, got {count}")
    policy.validate()
    index = index_for(machine)
    free = available.mask & index.all_cpus
    if count > free.bit_count():
        raise InsufficientCPUsError(
            f"not enough CPUs available: want {count}, {_describe_free(free)}"
        )
    if policy.full_pcpus_only:
        return CPUSet.from_mask(_take_whole_cores(index, free, count, policy))
    result = _take(index, free, count, policy)
    if result is None or result.bit_count() != count or result & ~free:
        raise InsufficientCPUsError(f"could not place {count} CPUs, {_describe_free(free)}")
    return CPUSet.from_mask(result)


def _take(index: TopologyIndex, free: int, count: int, policy: Policy) -> int | None:
    if policy.distribute_numa:
        group_size = policy.group_size
        # FullPCPUsOnly makes the kubelet hand out distributed CPUs a core at a time.
        if policy.full_pcpus_only and group_size == 1:
            group_size = index.smt_width
        return take_distributed(index, free, count, group_size, policy.strategy)
    # The kubelet only aligns by uncore cache with packed cores and the packed NUMA walk (it
    # rejects the option with DistributeCPUsAcrossCores and DistributeCPUsAcrossNUMA).
    align_uncore = policy.align_uncore and policy.strategy == "packed"
    return take_packed(index, free, count, policy.strategy, align_uncore)


def _take_whole_cores(index: TopologyIndex, free: int, count: int, policy: Policy) -> int:
    """FullPCPUsOnly: the request must be whole cores' worth of CPUs and be met with whole
    cores, like the kubelet's SMTAlignmentError checks."""
    width = index.smt_width
    if policy.distribute_numa and policy.group_size != 1 and policy.group_size % width != 0:
        # Groups that split cores cannot be handed out as whole cores; the kubelet has no such
        # knob (its group is always one core).
        raise InvalidInputError(
            f"CPU group size {policy.group_size} splits physical cores of {width} threads; "
            "with full physical cores only it must be a multiple of that"
        )
    # Not a policy error but a request this machine can never meet, whatever is free.
    if count % width != 0:
        raise InsufficientCPUsError(
            f"cannot place {count} CPUs on whole physical cores: each core has {width} threads"
        )
    whole = index.whole_free_cores(free)
    if whole.bit_count() < count:
        raise InsufficientCPUsError(
            f"not enough whole physical cores available: want {count} CPUs "
            f"({count // width} cores), {whole.bit_count()} CPUs are free in whole cores; "
            f"{_describe_free(free)}"
        )
    # The kubelet walks all free CPUs and, on a symmetric machine, ends with whole cores.
    # Where that is not so (cores with offline threads), walk the whole free cores only.
    for candidates in (free, whole):
        result = _take(index, candidates, count, policy)
        if result is not None and result.bit_count() == count and not index.partial_cores(result):
            return result
    raise InsufficientCPUsError(
        f"cannot place {count} CPUs on whole physical cores: "
        f"{whole.bit_count()} CPUs free in whole cores"
    )


def _describe_free(free: int) -> str:
    if not free:
        return "none free"
    return f"{free.bit_count()} free ({CPUSet.from_mask(free).format()})"
