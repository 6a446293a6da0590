"""How CPUs are picked for one request: the kubelet static policy's options, per request."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from dracpu.core.errors import InvalidInputError

STRATEGIES = ("packed", "spread")


@dataclass(frozen=True, slots=True)
class Policy:
    """How CPUs are picked for one request.

    strategy: `packed` fills cores before moving on; `spread` is the kubelet's
        DistributeCPUsAcrossCores (threads of different cores first).
    align_uncore: PreferAlignByUncoreCache; like the kubelet, only with the packed strategy
        and without distribute_numa (the kubelet refuses those combinations; here the
        preference is simply not applied to them).
    full_pcpus_only: FullPCPUsOnly; only whole physical cores.
    distribute_numa: DistributeCPUsAcrossNUMA, in groups of `group_size` CPUs (with
        full_pcpus_only and the default group size, a group is one core). Unlike the kubelet
        it may be combined with spread, which its distributed take already supports.
    """

    strategy: Literal["packed", "spread"] = "packed"
    align_uncore: bool = True
    full_pcpus_only: bool = False
    distribute_numa: bool = False
    group_size: int = 1

    def validate(self) -> None:
        if self.strategy not in STRATEGIES:
            raise InvalidInputError(
                f"unknown strategy {self.strategy!r}: expected one of {', '.join(STRATEGIES)}"
            )
        if isinstance(self.group_size, bool) or not isinstance(self.group_size, int):
            raise InvalidInputError(f"CPU group size must be an integer, got {self.group_size!r}")
        if self.group_size <= 0:
            raise InvalidInputError(f"CPU group size must be positive, got {self.group_size}")
        # The kubelet rejects this pair of options: spreading threads over cores is the
        # opposite of handing out whole cores.
        if self.strategy == "spread" and self.full_pcpus_only:
            raise InvalidInputError(
                "the spread strategy cannot be combined with full physical cores only"
            )
