"""Topology-aware CPU assignment: the kubelet CPU Manager's algorithm, as pure functions.

Public surface: `Policy` and `take_cpus`. The claim store and `dracpu simulate` both call
`take_cpus`, so a preview is exactly what the service would do.

Module map: `selection` (take_cpus and the FullPCPUsOnly checks), `policy` (the options),
`topology_index` (per-machine masks, cached), `accumulator` (free-CPU state and the kubelet's
orderings), `packed` (takeByTopologyNUMAPacked), `distributed` (takeByTopologyNUMADistributed),
`numa_plan` (its NUMA combination search), `remainder` (which nodes of a combination take the
remainder groups), `remainder_floor` (the least sum of squares of each size of those) and
`balance` (the kubelet's balance score). `compiled` finds a mypyc build of the hot modules made
from exactly these sources; `VARIANT` says which ran.
"""

from __future__ import annotations

from dracpu.allocator.algorithm import compiled as _compiled

_native = _compiled.native_path()
if _native is not None:
    __path__.insert(0, str(_native))  # the compiled modules shadow their sources
VARIANT = "pure Python" if _native is None else f"compiled by mypyc ({_native.parents[2].name})"

from dracpu.allocator.algorithm.policy import Policy  # noqa: E402
from dracpu.allocator.algorithm.selection import take_cpus  # noqa: E402

__all__ = ["VARIANT", "Policy", "take_cpus"]
