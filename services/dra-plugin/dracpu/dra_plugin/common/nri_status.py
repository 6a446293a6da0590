"""The nri-plugin's prerequisite verdicts (NRI, CDI), read from its view socket, so the
dra-plugin, the pod's one writer to the API server, can put them on the pod as Events."""

from __future__ import annotations

import os
from pathlib import Path

from dracpu.core import rpc
from dracpu.core.errors import DracpuError
from dracpu.core.prerequisites import Prerequisite
from dracpu.pb.nri_plugin.v1 import nri_plugin_pb2, nri_plugin_pb2_grpc

CALL_TIMEOUT = 5.0


async def nri_prerequisites(socket: str | os.PathLike[str]) -> list[Prerequisite] | None:
    """The verdicts the nri-plugin reports; None when it does not answer (not running here,
    or not yet)."""
    if not Path(socket).is_socket():
        return None
    try:
        async with rpc.channel(socket) as chan:
            stub = nri_plugin_pb2_grpc.NRIPluginViewStub(chan)
            reply = await rpc.call(
                stub.GetStatus(nri_plugin_pb2.GetStatusRequest(), timeout=CALL_TIMEOUT),
                f"status of {os.fspath(socket)}",
            )
    except DracpuError:
        return None
    return [Prerequisite.from_proto(p) for p in reply.prerequisites]
