"""The one retry policy of dracpu: exponential backoff with jitter, an optional deadline, and the
peer's own reason in the error that ends the attempts.

Every loop that waits for a peer (a reconnect, a publish, a push, a status write) takes its
delays from a `Backoff`; a call retried until a deadline goes through `retry`.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from dracpu.core.errors import UnavailableError

T = TypeVar("T")


@dataclass
class Backoff:
    """Delays that double from `initial` to `maximum`, each spread by ±`jitter` of itself so
    that many clients of one peer do not retry in step. `reset()` once a try succeeded."""

    initial: float = 0.2
    maximum: float = 5.0
    factor: float = 2.0
    jitter: float = 0.2
    attempts: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        if not 0 < self.initial <= self.maximum:
            raise ValueError(f"backoff needs 0 < initial <= maximum, got {self}")
        if self.factor < 1 or not 0 <= self.jitter < 1:
            raise ValueError(f"backoff needs factor >= 1 and 0 <= jitter < 1, got {self}")

    def reset(self) -> None:
        self.attempts = 0

    def next_delay(self) -> float:
        """The delay before the next try; each call counts one failed try."""
        base = min(self.initial * self.factor**self.attempts, self.maximum)
        self.attempts += 1
        spread = base * self.jitter
        return max(0.0, base + random.uniform(-spread, spread))

    async def wait(self) -> float:
        """Sleep the next delay; returns it (for the log line that says when the next try is)."""
        delay = self.next_delay()
        await asyncio.sleep(delay)
        return delay


class RetryExhaustedError(UnavailableError):
    """A call retried until its deadline that never succeeded; the message carries the last
    error the peer gave."""


async def retry(
    call: Callable[[], Awaitable[T]],
    *,
    what: str,
    deadline: float,
    retry_on: tuple[type[BaseException], ...] = (UnavailableError,),
    backoff: Backoff | None = None,
) -> T:
    """`await call()` until it returns, retrying errors of the `retry_on` kinds with backoff for
    at most `deadline` seconds; other errors pass at once. At the deadline the last error is
    raised as `RetryExhaustedError`, naming `what`, the tries and the peer's reason."""
    policy = backoff or Backoff(initial=0.05, maximum=1.0)
    started = time.monotonic()
    tries = 0
    while True:
        tries += 1
        try:
            return await call()
        except retry_on as exc:
            left = started + deadline - time.monotonic()
            delay = policy.next_delay()
            if left <= delay:
                reason = str(exc) or type(exc).__name__
                raise RetryExhaustedError(
                    f"{what}: gave up after {tries} tries in {time.monotonic() - started:.1f} s: "
                    f"{reason}"
                ) from exc
            await asyncio.sleep(delay)
