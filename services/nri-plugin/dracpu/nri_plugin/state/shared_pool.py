"""The allocator's shared pool as the CPU plugin knows it: the newest generation announced,
whether asked for (GetSharedPool) or followed (WatchSharedPool), kept through allocator
restarts. Shared containers run on it; its changes are what the pool pushes carry to them."""

from __future__ import annotations

import asyncio

from dracpu.core.clients.allocator import ContainerAllocator
from dracpu.core.cpuset import CPUSet
from dracpu.core.errors import DracpuError, UnavailableError
from dracpu.core.log import get_logger
from dracpu.core.retry import Backoff
from dracpu.pb.allocator.v1 import allocator_pb2

log = get_logger(__name__)


class SharedPool:
    """The newest shared pool the allocator announced (None until one is known). Changed only
    under the plugin's lock; `changed` is set whenever its CPUs change."""

    def __init__(self, allocator: ContainerAllocator, lock: asyncio.Lock) -> None:
        self.cpus: CPUSet | None = None
        self.generation = -1
        self.changed = asyncio.Event()
        self.watching = False  # the WatchSharedPool stream is delivering
        self._allocator = allocator
        self._lock = lock

    def note(self, pool: allocator_pb2.SharedPool) -> CPUSet:
        """Take a pool the allocator sent, unless an older generation than the one known."""
        cpus = CPUSet.parse(pool.cpus)
        if pool.generation >= self.generation or self.cpus is None:
            if cpus != self.cpus:
                self.changed.set()
            self.cpus = cpus
            self.generation = pool.generation
        return self.cpus

    async def fetch(self) -> CPUSet:
        """The allocator's pool now; the last one known while it does not answer."""
        try:
            return self.note(await self._allocator.shared_pool())
        except DracpuError as exc:
            if self.cpus is not None:
                log.warning("allocator unreachable; using last shared pool", error=str(exc))
                return self.cpus
            raise UnavailableError(f"shared pool unknown: {exc}") from None

    async def current(self) -> CPUSet:
        """The watched pool while the watch delivers one, else the allocator's now."""
        cached = self.cpus
        return cached if self.watching and cached is not None else await self.fetch()

    async def wait_for_allocator(self, retry_delay: float = 0.1, max_delay: float = 2.0) -> None:
        """Until the allocator answers with the shared pool. Registering with the runtime
        before that would only fail its Synchronize (and log errors on the runtime side)."""
        backoff = Backoff(initial=retry_delay, maximum=max_delay)
        waited = False
        while True:
            try:
                async with self._lock:
                    pool = self.note(await self._allocator.shared_pool())
            except DracpuError as exc:
                if not waited:
                    log.info(0, "waiting for the allocator before registering", error=str(exc))
                waited = True
                await backoff.wait()
                continue
            log.info(2, "allocator answers", shared_pool=pool)
            return

    async def watch(self, retry_delay: float = 0.5, max_delay: float = 5.0) -> None:
        """Follow the allocator's shared pool forever; reconnects with backoff."""
        backoff = Backoff(initial=retry_delay, maximum=max_delay)
        while True:
            delay = None
            try:
                async for pool in self._allocator.watch_shared_pool():
                    backoff.reset()
                    async with self._lock:
                        self.note(pool)
                        self.watching = True
            except DracpuError as exc:
                delay = backoff.next_delay()
                log.info(2, "shared pool watch ended; retrying", error=str(exc), delay_s=delay)
            finally:
                self.watching = False
            await asyncio.sleep(backoff.next_delay() if delay is None else delay)
