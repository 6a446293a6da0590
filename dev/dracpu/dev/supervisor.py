"""A small process supervisor: start processes in order, each only once the previous one is
ready; restart a crashed one with backoff; stop them all, newest first, leaving nothing behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from dracpu.core import children
from dracpu.core.files import write_atomic
from dracpu.core.tasks import within
from dracpu.dev.readiness import Readiness, is_ready

INITIAL_BACKOFF = 0.5
MAX_BACKOFF = 10.0
# A process that ran this long before crashing starts again from the initial backoff.
STABLE_AFTER = 30.0
POLL_INTERVAL = 0.1
LOG_TAIL_LINES = 5


@dataclass(frozen=True)
class ProcessSpec:
    name: str
    argv: list[str]
    readiness: Readiness
    log_file: Path


@dataclass
class _Running:
    spec: ProcessSpec
    process: asyncio.subprocess.Process | None = None
    started_at: float = 0.0
    restarts: int = 0
    backoff: float = INITIAL_BACKOFF
    watcher: asyncio.Task[None] | None = None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    return text.splitlines()[-lines:]


class StartError(Exception):
    """A process did not become ready during start-up."""


class Supervisor:
    """Owns the child processes of one run. `report` receives one progress line at a time."""

    def __init__(
        self,
        specs: list[ProcessSpec],
        *,
        report: Callable[[str], None],
        ready_timeout: float = 30.0,
        stop_timeout: float = 5.0,
        status_file: Path | None = None,
        status_extra: dict[str, Any] | None = None,
    ) -> None:
        self._running = [_Running(spec) for spec in specs]
        self._report = report
        # Unbuffered: a service's last words reach its log even when it is killed.
        self._env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self._ready_timeout = ready_timeout
        self._stop_timeout = stop_timeout
        self._status_file = status_file
        self._status_extra = status_extra or {}
        self._stopping = asyncio.Event()
        self._logs: dict[str, TextIO] = {}

    # -- start ---------------------------------------------------------------------------

    def request_stop(self) -> None:
        """Ask for a stop (from a signal handler); `start` gives up, `wait` returns."""
        self._stopping.set()

    async def wait(self) -> None:
        await self._stopping.wait()

    async def start(self) -> bool:
        """Start every process in order. False when a stop was requested meanwhile; raises
        StartError (after stopping what started) when one exits or is not ready in time."""
        if not children.available():
            self._report(
                "setpriv (util-linux) not found: the processes outlive this one if it is "
                "killed outright"
            )
        for running in self._running:
            name = running.spec.name
            if self._stopping.is_set():
                return False
            self._report(f"starting {name}: waiting for {running.spec.readiness.describe()}")
            began = time.monotonic()
            try:
                await self._spawn(running)
            except StartError as exc:
                await self.stop()
                raise StartError(f"{name}: {exc}") from None
            problem = await self._wait_ready(running)
            if self._stopping.is_set():
                return False
            if problem is not None:
                tail = log_tail(running.spec.log_file)
                await self.stop()
                detail = "; last log lines:\n  " + "\n  ".join(tail) if tail else ""
                raise StartError(f"{name} {problem} (log: {running.spec.log_file}){detail}")
            self._report(f"{name} ready (pid {running.pid}, {time.monotonic() - began:.1f}s)")
        for running in self._running:
            running.watcher = asyncio.create_task(self._watch(running))
        self._write_status()
        return True

    async def _spawn(self, running: _Running) -> None:
        spec = running.spec
        log = self._logs.get(spec.name)
        if log is None:
            spec.log_file.parent.mkdir(parents=True, exist_ok=True)
            log = self._logs[spec.name] = spec.log_file.open("a", encoding="utf-8")
        log.write(f"--- dracpu dev: starting {' '.join(spec.argv)}\n")
        log.flush()
        try:
            running.process = await asyncio.create_subprocess_exec(
                # If the supervisor is killed outright, the kernel stops its children too, so
                # no service outlives a `dev up` (dracpu.core.children: no Python in the child).
                *children.tied_to_parent(spec.argv),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=self._env,
                # Own session: a Ctrl-C on the terminal reaches only the supervisor, which
                # then stops the services in order.
                start_new_session=True,
            )
        except OSError as exc:
            raise StartError(f"cannot run {spec.argv[0]}: {exc.strerror or exc}") from None
        running.started_at = time.monotonic()

    async def _wait_ready(self, running: _Running) -> str | None:
        """None once ready; otherwise why not."""
        process = running.process
        assert process is not None
        deadline = time.monotonic() + self._ready_timeout
        while time.monotonic() < deadline and not self._stopping.is_set():
            if process.returncode is not None:
                return f"exited during start ({describe_exit(process.returncode)})"
            if await is_ready(running.spec.readiness):
                return None
            with contextlib.suppress(TimeoutError):
                await within(process.wait(), POLL_INTERVAL)
        if self._stopping.is_set():
            return "stopped while starting"
        return f"not ready after {self._ready_timeout:.0f}s"

    # -- restart -------------------------------------------------------------------------

    async def _watch(self, running: _Running) -> None:
        name = running.spec.name
        while True:
            process = running.process
            assert process is not None
            code = await process.wait()
            if self._stopping.is_set():
                return
            ran = time.monotonic() - running.started_at
            if ran >= STABLE_AFTER:
                running.backoff = INITIAL_BACKOFF
            self._report(
                f"{name} (pid {process.pid}) stopped: {describe_exit(code)} after {ran:.1f}s; "
                f"restarting in {running.backoff:.1f}s (log: {running.spec.log_file})"
            )
            with contextlib.suppress(TimeoutError):
                await within(self._stopping.wait(), running.backoff)
            if self._stopping.is_set():
                return
            running.backoff = min(running.backoff * 2, MAX_BACKOFF)
            running.restarts += 1
            try:
                await self._spawn(running)
            except StartError as exc:
                # The old, exited process stays in place: the loop reports it and backs off.
                self._report(f"{name}: {exc}")
                continue
            problem = await self._wait_ready(running)
            if problem is None:
                self._report(f"{name} restarted (pid {running.pid}, restart {running.restarts})")
                self._write_status()
            elif running.process is not None and running.process.returncode is None:
                self._report(f"{name} {problem}; killing it to try again")
                running.process.kill()

    # -- stop ----------------------------------------------------------------------------

    async def stop(self) -> None:
        """Stop every process, newest first: SIGTERM, then SIGKILL after the grace period."""
        self._stopping.set()
        for running in reversed(self._running):
            if running.watcher is not None:
                running.watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await running.watcher
            process = running.process
            if process is None or process.returncode is not None:
                continue
            with contextlib.suppress(ProcessLookupError):
                process.terminate()
            try:
                await within(process.wait(), self._stop_timeout)
            except TimeoutError:
                self._report(f"{running.spec.name} ignored SIGTERM; killing it")
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()
            self._report(f"{running.spec.name} stopped")
        for log in self._logs.values():
            log.close()
        self._logs.clear()
        if self._status_file is not None:
            self._status_file.unlink(missing_ok=True)

    # -- status --------------------------------------------------------------------------

    def pids(self) -> dict[str, int | None]:
        return {running.spec.name: running.pid for running in self._running}

    def _write_status(self) -> None:
        if self._status_file is None:
            return
        document = {
            **self._status_extra,
            "pid": os.getpid(),
            "services": {
                running.spec.name: {
                    "pid": running.pid,
                    "restarts": running.restarts,
                    "log": str(running.spec.log_file),
                    "argv": running.spec.argv,
                }
                for running in self._running
            },
        }
        text = json.dumps(document, indent=2) + "\n"
        write_atomic(self._status_file, text.encode(), durable=False)
