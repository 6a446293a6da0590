"""How many containers one UpdateContainers call carries, and how long to wait for its answer.

The runtime applies a plugin's updates one after another (containerd: one runc update per
container, about 27 ms each on a small machine) and answers once all are done. A batch must be
small enough that its answer comes back well within the wait, and the wait long enough for the
batch: both follow the measured cost per container, starting from a prior. Between batches the
runtime's lifecycle calls get their turn.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

PRIOR_COST: Final = 0.03  # seconds per container before anything was measured
MIN_COST: Final = 0.0005
SMOOTHING: Final = 0.3  # weight of a new measurement in the running estimate
# An allocator call's timeout when no runtime request bounds it (and the least one gets).
ALLOCATOR_CALL_TIMEOUT: Final = 1.5


@dataclass
class UpdatePacer:
    """Running estimate of the runtime's cost per container update; pure arithmetic."""

    request_timeout: float = 2.0  # the runtime's plugin request timeout (Configure)
    max_batch: int = 500
    # A batch aims at this share of the request timeout, so a runtime twice as slow as measured
    # still answers well within the wait.
    batch_share: float = 0.25
    cost: float = field(default=PRIOR_COST)
    measured: int = 0  # batches whose answer fed the estimate

    def batch_size(self) -> int:
        size = int(self.request_timeout * self.batch_share / self.cost)
        return max(1, min(self.max_batch, size))

    def call_budget(self, floor: float) -> float:
        """How long an allocator call made inside one of the runtime's requests may take: the
        runtime's request timeout less a margin to answer (the larger of 0.25 s and 10 %), and
        never less than `floor` (the allocator client's own timeout)."""
        margin = max(0.25, self.request_timeout / 10)
        return max(floor, self.request_timeout - margin)

    def deadline(self, count: int) -> float:
        """How long to wait for the answer to a batch of `count` updates."""
        return max(self.request_timeout, 4 * count * self.cost + self.request_timeout / 4)

    def observe(self, count: int, seconds: float) -> None:
        """A batch of `count` updates was answered after `seconds`."""
        if count <= 0:
            return
        per = max(MIN_COST, seconds / count)
        self.cost = per if self.measured == 0 else (1 - SMOOTHING) * self.cost + SMOOTHING * per
        self.measured += 1

    def observe_timeout(self) -> None:
        """A batch got no answer in time: halve the next batches (the runtime may be slower
        than measured, or just busy; answers that do come bring the estimate back)."""
        self.cost = min(self.cost * 2, max(self.request_timeout, PRIOR_COST))
