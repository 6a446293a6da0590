"""The nri-plugin's prerequisite verdicts (NRI, CDI), read from its view socket, so the
dra-plugin, the pod's one writer to the API server, can put them on the pod as Events.

Followed on the nri-plugin's WatchPrerequisites stream: nothing is asked while nothing changes.
An nri-plugin of an older release answers UNIMPLEMENTED and is asked every POLL_INTERVAL
seconds instead; one not running (yet) is looked for again with backoff up to that interval.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path

from dracpu.core.clients.nri_plugin import NRIPluginClient
from dracpu.core.errors import DracpuError, UnimplementedError
from dracpu.core.log import get_logger
from dracpu.core.prerequisites import Prerequisite
from dracpu.core.retry import Backoff

log = get_logger(__name__)

CALL_TIMEOUT = 5.0
POLL_INTERVAL = 10.0  # an nri-plugin without the watch, or none found: look again this often


async def nri_prerequisites(socket: str | os.PathLike[str]) -> list[Prerequisite] | None:
    """The verdicts the nri-plugin reports; None when it does not answer (not running here,
    or not yet)."""
    if not Path(socket).is_socket():
        return None
    try:
        # Not waiting for the channel: a plugin that is not there is asked again later.
        async with NRIPluginClient(socket, timeout=CALL_TIMEOUT, wait_for_ready=False) as client:
            reply = await client.status()
    except DracpuError:
        return None
    return [Prerequisite.from_proto(p) for p in reply.prerequisites]


async def follow_nri_prerequisites(
    socket: str | os.PathLike[str],
    report: Callable[[Prerequisite], None],
    poll_interval: float = POLL_INTERVAL,
) -> None:
    """Hand every verdict the nri-plugin reports to `report`, as they change, until
    cancelled."""
    backoff = Backoff(initial=min(1.0, poll_interval), maximum=poll_interval)
    while True:
        try:
            if Path(socket).is_socket():
                async with NRIPluginClient(
                    socket, timeout=CALL_TIMEOUT, wait_for_ready=False
                ) as client:
                    async for verdicts in client.watch_prerequisites():
                        backoff.reset()
                        for verdict in verdicts.prerequisites:
                            report(Prerequisite.from_proto(verdict))
        except UnimplementedError:
            log.info(2, "the nri-plugin has no prerequisite watch (an older release); asking "
                     "it periodically instead", interval_s=poll_interval)  # fmt: skip
            await _poll(socket, report, poll_interval)
        except DracpuError as exc:
            log.info(4, "nri-plugin prerequisites not followed", error=str(exc))
        await backoff.wait()


async def _poll(
    socket: str | os.PathLike[str], report: Callable[[Prerequisite], None], interval: float
) -> None:
    """Ask every `interval` seconds until the nri-plugin does not answer (it may come back a
    newer release)."""
    while (verdicts := await nri_prerequisites(socket)) is not None:
        for verdict in verdicts:
            report(verdict)
        await asyncio.sleep(interval)
