"""The wake-up of a server-streaming watch: whoever publishes a new value calls `notify()`;
each watcher takes `next()` before it reads the current value and awaits it afterwards, so a
change made while it was sending is never missed (it finds the event already set)."""

from __future__ import annotations

import asyncio


class Changes:
    """One event per generation: `notify()` sets the current one and starts the next."""

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self.count = 0

    def next(self) -> asyncio.Event:
        """The event set at the next change (take it before reading the value it guards)."""
        return self._event

    def notify(self) -> None:
        self.count += 1
        event, self._event = self._event, asyncio.Event()
        event.set()
