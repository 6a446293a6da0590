"""How long a kubelet call may wait for the allocator: the kubelet's own deadline for it.

The kubelet gives NodePrepareResources and NodeUnprepareResources a deadline (45 s in current
releases) and sends it with the call. The plugin waits for the allocator as long as that
deadline allows, less a margin to build and send its answer, so an allocator that is being
replaced (and is slow to start) is waited for as long as the kubelet itself would wait.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import grpc

# The kubelet's DRA call timeout, for a caller that sends no deadline.
KUBELET_CALL_TIMEOUT = 45.0
# Kept back from the caller's deadline to answer in time: the larger of these two.
MARGIN_SECONDS = 1.0
MARGIN_FRACTION = 0.05


@dataclass(frozen=True)
class CallBudget:
    """The monotonic instant by which the allocator must have answered."""

    end: float

    @classmethod
    def seconds(cls, seconds: float) -> CallBudget:
        return cls(time.monotonic() + max(seconds, 0.0))

    @classmethod
    def of(cls, context: grpc.aio.ServicerContext) -> CallBudget:
        """The caller's time remaining, less the margin to answer."""
        remaining = context.time_remaining()
        if remaining is None:  # no deadline sent: the kubelet's own
            remaining = KUBELET_CALL_TIMEOUT
        margin = max(MARGIN_SECONDS, remaining * MARGIN_FRACTION)
        # A deadline shorter than twice the margin keeps half of it for the answer.
        return cls.seconds(max(remaining - margin, remaining / 2))

    def left(self) -> float:
        return max(self.end - time.monotonic(), 0.0)
