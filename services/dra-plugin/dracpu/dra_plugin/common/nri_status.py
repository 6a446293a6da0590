"""The nri-plugin's prerequisite verdicts (NRI, CDI), read from its view socket, so the
dra-plugin, the pod's one writer to the API server, can put them on the pod as Events."""

from __future__ import annotations

import os
from pathlib import Path

from dracpu.core.clients.nri_plugin import NRIPluginClient
from dracpu.core.errors import DracpuError
from dracpu.core.prerequisites import Prerequisite

CALL_TIMEOUT = 5.0


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
