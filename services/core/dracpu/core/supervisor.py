"""The long-running loops of a service, each started by name and kept running.

A loop that raises anything but a cancellation at shutdown is logged with its traceback, counted
(`dra_cpu_loop_restarts_total`) and started again after a `Backoff` delay. A loop that returns is
done when declared `once`, and otherwise started again the same way: a loop meant to run forever
that ends has stopped doing its work. Loops catch the errors they expect (`DracpuError`) and
retry those themselves; the supervisor is for the rest.

Readiness: the service is not ready while one of its loops waits to be restarted, nor while a
loop has failed more than `failure_limit` times in a row. A loop's failures stop counting as in a
row once it has run `stable_after` seconds without failing. Every readiness change is handed to
the gates attached (`attach`; the gRPC servers' health, `dracpu.core.rpc.Health`), and `loops()`
says each loop's state for `Info.GetLoops` (the api's `/readyz` shows the loops not ready).

At shutdown `stop()` cancels every loop and waits for it; an error a loop raises while it stops
is logged, never dropped.
"""

from __future__ import annotations

import asyncio
import enum
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from dracpu.core import metrics
from dracpu.core.log import get_logger
from dracpu.core.retry import Backoff

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry, Counter

log = get_logger(__name__)

FAILURE_LIMIT = 3  # failures in a row past which a running loop still leaves the service unready
STABLE_AFTER = 60.0  # seconds a restarted loop runs before its failures no longer count in a row
STOP_GRACE = 5.0  # seconds `stop()` waits for the cancelled loops
READINESS_GATE = "loops"


def restart_backoff() -> Backoff:
    """The delays between a loop's restarts: 1 s doubling to 30 s."""
    return Backoff(initial=1.0, maximum=30.0)


class LoopState(enum.StrEnum):
    RUNNING = "running"
    RESTARTING = "restarting"  # failed or ended; waiting out its backoff delay
    DONE = "done"  # a one-shot loop that finished
    STOPPED = "stopped"  # cancelled at shutdown


@dataclass(frozen=True)
class LoopStatus:
    """One loop as the supervisor sees it."""

    name: str
    state: LoopState
    ready: bool
    restarts: int = 0
    failures_in_row: int = 0
    last_error: str = ""
    last_error_at: float = 0.0  # seconds since the epoch; 0 when it never failed


class ReadinessGate(Protocol):
    async def block(self, reason: str, blocked: bool) -> None:
        """Hold the service unready for `reason` while `blocked`."""


@dataclass
class _Loop:
    name: str
    run: Callable[[], Awaitable[None]]
    once: bool
    state: LoopState = LoopState.RUNNING
    restarts: int = 0
    failures: int = 0
    last_error: str = ""
    last_error_at: float = 0.0
    runner: asyncio.Task[None] | None = field(default=None, repr=False)


class Supervisor:
    """The loops of one service (`service` names it in the log and the counter)."""

    def __init__(
        self,
        service: str,
        *,
        registry: CollectorRegistry | None = None,
        backoff: Callable[[], Backoff] | None = None,
        failure_limit: int = FAILURE_LIMIT,
        stable_after: float = STABLE_AFTER,
    ) -> None:
        self.service = service
        self.failure_limit = failure_limit
        self.stable_after = stable_after
        self._backoff = backoff or restart_backoff
        self._counter: Counter | None = (
            metrics.loop_restarts(registry) if registry is not None else None
        )
        self._loops: dict[str, _Loop] = {}
        self._gates: list[ReadinessGate] = []
        self._stopping = False

    # ---- starting and reading ---------------------------------------------------------------

    def start(self, name: str, run: Callable[[], Awaitable[None]], *, once: bool = False) -> None:
        """Run `run()` as the loop `name` until `stop()`; `once`: its return ends it."""
        if name in self._loops:
            raise ValueError(f"loop {name!r} of {self.service} started twice")
        if self._stopping:
            raise RuntimeError(f"loop {name!r} started after {self.service} began stopping")
        loop = _Loop(name, run, once)
        self._loops[name] = loop
        if self._counter is not None:
            self._counter.labels(service=self.service, loop=name)  # the series exists at 0
        loop.runner = asyncio.create_task(self._supervise(loop), name=f"{self.service}/{name}")

    def names(self) -> list[str]:
        return list(self._loops)

    def loops(self) -> list[LoopStatus]:
        return [self._status(loop) for loop in self._loops.values()]

    @property
    def ready(self) -> bool:
        return all(self._ready(loop) for loop in self._loops.values())

    def unready(self) -> list[LoopStatus]:
        return [status for status in self.loops() if not status.ready]

    async def attach(self, gate: ReadinessGate) -> None:
        """Hand every readiness change to `gate`, starting with the current one."""
        self._gates.append(gate)
        await gate.block(READINESS_GATE, not self.ready)

    def _ready(self, loop: _Loop) -> bool:
        if loop.state is LoopState.RESTARTING:
            return False
        return loop.state is not LoopState.RUNNING or loop.failures <= self.failure_limit

    def _status(self, loop: _Loop) -> LoopStatus:
        return LoopStatus(
            name=loop.name,
            state=loop.state,
            ready=self._ready(loop),
            restarts=loop.restarts,
            failures_in_row=loop.failures,
            last_error=loop.last_error,
            last_error_at=loop.last_error_at,
        )

    async def _changed(self) -> None:
        blocked = not self.ready
        for gate in self._gates:
            await gate.block(READINESS_GATE, blocked)

    # ---- running ----------------------------------------------------------------------------

    async def _supervise(self, loop: _Loop) -> None:
        backoff = self._backoff()
        while True:
            loop.state = LoopState.RUNNING
            await self._changed()
            error = await self._attempt(loop, backoff)
            if error is None and (loop.once or self._stopping):
                loop.state = LoopState.DONE
                await self._changed()
                log.info(2, "loop done", service=self.service, loop=loop.name)
                return
            loop.state = LoopState.RESTARTING
            loop.restarts += 1
            loop.failures += 1
            loop.last_error_at = time.time()
            if self._counter is not None:
                self._counter.labels(service=self.service, loop=loop.name).inc()
            if error is None:
                loop.last_error = "the loop returned"
                log.warning(
                    "loop ended; restarting it",
                    service=self.service,
                    loop=loop.name,
                    restarts=loop.restarts,
                    failures_in_row=loop.failures,
                )
            else:
                loop.last_error = _describe(error)
                log.error(
                    "loop failed; restarting it",
                    service=self.service,
                    loop=loop.name,
                    error=loop.last_error,
                    restarts=loop.restarts,
                    failures_in_row=loop.failures,
                    stacktrace=_traceback(error),
                )
            await self._changed()
            delay = await backoff.wait()
            log.info(2, "loop restarting", service=self.service, loop=loop.name, after_s=delay)

    async def _attempt(self, loop: _Loop, backoff: Backoff) -> BaseException | None:
        """Run the loop once to its end: the error it raised, or None when it returned. Its
        own task, so that its failures stop counting in a row once it has run a while."""
        task = asyncio.create_task(_call(loop.run), name=f"{self.service}/{loop.name}/run")
        try:
            done, _ = await asyncio.wait({task}, timeout=self.stable_after)
            if not done:
                if loop.failures:
                    loop.failures = 0
                    backoff.reset()
                    await self._changed()
                await asyncio.wait({task})
        except asyncio.CancelledError:
            await self._cancel(loop, task)
            raise
        if task.cancelled():
            # Cancelled by someone other than this supervisor: the loop stopped all the same.
            return asyncio.CancelledError(f"loop {loop.name} was cancelled")
        return task.exception()

    async def _cancel(self, loop: _Loop, task: asyncio.Task[None]) -> None:
        task.cancel()
        await asyncio.wait({task})
        if not task.cancelled() and task.exception() is not None:
            error = task.exception()
            assert error is not None
            log.error(
                "loop failed while stopping",
                service=self.service,
                loop=loop.name,
                error=_describe(error),
                stacktrace=_traceback(error),
            )

    # ---- stopping ---------------------------------------------------------------------------

    async def stop(self, grace: float = STOP_GRACE) -> None:
        """Cancel every loop and wait (at most `grace` seconds) for them to end."""
        self._stopping = True
        runners = {loop.runner: loop for loop in self._loops.values() if loop.runner is not None}
        for runner in runners:
            runner.cancel()
        if not runners:
            return
        done, pending = await asyncio.wait(runners, timeout=grace)
        for runner in done:
            loop = runners[runner]
            if not runner.cancelled() and runner.exception() is not None:
                error = runner.exception()
                assert error is not None
                log.error(
                    "loop supervision failed",
                    service=self.service,
                    loop=loop.name,
                    error=_describe(error),
                    stacktrace=_traceback(error),
                )
            if loop.state is not LoopState.DONE:
                loop.state = LoopState.STOPPED
        for runner in pending:
            log.error(
                "loop did not stop when cancelled",
                service=self.service,
                loop=runners[runner].name,
                grace_s=grace,
            )


async def _call(run: Callable[[], Awaitable[None]]) -> None:
    await run()


def _describe(error: BaseException) -> str:
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _traceback(error: BaseException) -> str:
    return "".join(traceback.format_exception(error)).rstrip()
