"""The path one call takes through a service's modules, traced with sys.setprofile.

Only the service's own modules count: `dracpu.<service>.*` and the other services', never
`dracpu.core.*` (shared plumbing: cpusets, names, errors, logging) nor the generated
`dracpu.pb.*` messages, nor anything outside dracpu (asyncio, grpc, the standard library).

A module is *entered* when a function of it is called from another module (or from outside
every counted module): the caller is the nearest counted frame on the stack, for an asyncio
task the module that created it, and for a job of the event loop's thread pool the module
that handed it over. Calls within one module, the natural return of a callee to its caller,
a coroutine or generator resuming where it waited, and the code the dataclass machinery
generates (`__init__`, `__eq__`: no source in the module) are not entries. Entries into the
same module one after another are one entry (per thread of work: the call's own, or one
thread-pool job). A *return* is an entry into a module that was entered earlier in the call.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

IGNORED = ("dracpu.core.", "dracpu.pb.")


def counted(module: str) -> bool:
    return module.startswith("dracpu.") and not module.startswith(IGNORED)


@dataclass(frozen=True)
class Entry:
    module: str
    function: str
    caller: str | None
    thread: int  # 0: the call's own thread of work; n: the n-th thread-pool job


@dataclass
class ModulePath:
    """The entries of one traced call, consecutive ones into the same module already one."""

    entries: list[Entry] = field(default_factory=list)

    @property
    def modules(self) -> set[str]:
        return {e.module for e in self.entries}

    @property
    def returns(self) -> int:
        return len(self.entries) - len(self.modules)

    def entered(self, module: str) -> int:
        return sum(1 for e in self.entries if e.module == module)

    def describe(self) -> str:
        """One line per entry, a return marked, for a failing assertion to show."""
        seen: set[str] = set()
        lines = []
        for e in self.entries:
            mark = "return" if e.module in seen else "      "
            seen.add(e.module)
            job = f"  [thread-pool job {e.thread}]" if e.thread else ""
            lines.append(f"{mark} {e.module}.{e.function}  <- {e.caller or '(outside)'}{job}")
        lines.append(f"{len(self.modules)} modules, {self.returns} returns")
        return "\n".join(lines)


class _Jobs(ThreadPoolExecutor):
    """The loop's thread pool while tracing: each job traced, attributed to its submitter."""

    def __init__(self, tracer: _Tracer) -> None:
        super().__init__(max_workers=4)
        self._tracer = tracer

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        tracer = self._tracer
        origin = tracer.nearest(sys._getframe(1))
        job = tracer.new_job()

        def traced() -> Any:
            tracer.local.job, tracer.local.origin = job, origin
            sys.setprofile(tracer.profile)
            try:
                return fn(*args, **kwargs)
            finally:
                sys.setprofile(None)

        return super().submit(traced)


class _Tracer:
    def __init__(self) -> None:
        self.path = ModulePath()
        self.local = threading.local()
        self._lock = threading.Lock()
        self._jobs = 0
        self._last: dict[int, str] = {}
        self._frames: list[FrameType] = []  # kept alive, so their ids stay theirs
        self._seen: set[int] = set()
        self._task_origins: dict[int, str | None] = {}

    def new_job(self) -> int:
        with self._lock:
            self._jobs += 1
            return self._jobs

    @staticmethod
    def module_of(frame: FrameType) -> str | None:
        if not frame.f_code.co_filename.endswith(".py"):
            return None  # generated code: dataclass __init__, __eq__ ...
        name = str(frame.f_globals.get("__name__", ""))
        return name if counted(name) else None

    def nearest(self, frame: FrameType | None) -> str | None:
        while frame is not None:
            module = self.module_of(frame)
            if module is not None:
                return module
            if id(frame) in self._task_origins:
                return self._task_origins[id(frame)]
            frame = frame.f_back
        return getattr(self.local, "origin", None)

    def profile(self, frame: FrameType, event: str, arg: object) -> None:
        if event != "call" or id(frame) in self._seen:
            return  # not a call, or a coroutine or generator resuming
        with self._lock:
            self._seen.add(id(frame))
            self._frames.append(frame)
        module = self.module_of(frame)
        if module is None:
            return
        if id(frame) in self._task_origins:
            caller = self._task_origins[id(frame)]
        else:
            caller = self.nearest(frame.f_back)
        if caller == module:
            return
        job = getattr(self.local, "job", 0)
        with self._lock:
            if self._last.get(job) == module:
                return
            self._last[job] = module
            self.path.entries.append(Entry(module, frame.f_code.co_name, caller, job))

    def task(
        self, loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any], **kw: Any
    ) -> asyncio.Task[Any]:
        frame = getattr(coro, "cr_frame", None)
        if frame is not None:
            self._task_origins[id(frame)] = self.nearest(sys._getframe(1))
            self._frames.append(frame)
        return asyncio.Task(coro, loop=loop, **kw)


async def trace(call: Coroutine[Any, Any, Any]) -> tuple[Any, ModulePath]:
    """Await `call` on the running loop, tracing the service modules it enters."""
    tracer = _Tracer()
    loop = asyncio.get_running_loop()
    factory = loop.get_task_factory()
    # The loop's own pool, put back afterwards (CPython keeps it there; None until first used).
    previous = getattr(loop, "_default_executor", None)
    jobs = _Jobs(tracer)
    loop.set_task_factory(tracer.task)  # type: ignore[arg-type]
    loop.set_default_executor(jobs)
    sys.setprofile(tracer.profile)
    try:
        result = await call
    finally:
        sys.setprofile(None)
        loop.set_task_factory(factory)
        loop.set_default_executor(previous or ThreadPoolExecutor())
        jobs.shutdown(wait=True)
    return result, tracer.path
