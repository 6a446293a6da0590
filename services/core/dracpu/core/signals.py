"""How a service learns it should stop: SIGTERM (the kubelet, the dev runner) or SIGINT."""

from __future__ import annotations

import asyncio
import signal


def stop_event() -> asyncio.Event:
    """An event the running loop sets on SIGTERM or SIGINT; call from inside the loop."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    return stop
