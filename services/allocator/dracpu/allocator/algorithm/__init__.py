"""Topology-aware CPU assignment: the kubelet CPU Manager's algorithm, as pure functions.

Public surface: `Policy` and `take_cpus`. The claim store and `dracpu simulate` both call
`take_cpus`, so a preview is exactly what the service would do.

Module map: `selection` (take_cpus and the FullPCPUsOnly checks), `policy` (the options),
`topology_index` (per-machine masks, cached), `accumulator` (free-CPU state and the kubelet's
orderings), `packed` (takeByTopologyNUMAPacked), `distributed` (takeByTopologyNUMADistributed),
`numa_plan` (its NUMA combination search), `remainder` (which nodes of a combination take the
remainder groups), `remainder_floor` (the least sum of squares of each size of those) and
`balance` (the kubelet's balance score).
"""

from __future__ import annotations

from dracpu.allocator.algorithm.policy import Policy
from dracpu.allocator.algorithm.selection import take_cpus

__all__ = ["Policy", "take_cpus"]
