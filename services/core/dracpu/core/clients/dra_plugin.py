"""The dra-plugin's view service's client: its status, read by the api."""

from __future__ import annotations

from typing import Any

import grpc

from dracpu.core.clients.base import ServiceClient
from dracpu.pb.dra_plugin.v1 import dra_plugin_pb2, dra_plugin_pb2_grpc


class DRAPluginClient(ServiceClient):
    service = "dra-plugin"

    def _make_stub(self, channel: grpc.aio.Channel) -> Any:
        return dra_plugin_pb2_grpc.DRAPluginViewStub(channel)

    async def status(self) -> dra_plugin_pb2.PluginStatus:
        reply: dra_plugin_pb2.PluginStatus = await self.unary(
            "DRAPluginView.GetStatus",
            lambda stub, t: stub.GetStatus(
                dra_plugin_pb2.GetStatusRequest(), timeout=t, wait_for_ready=self.wait_for_ready
            ),
        )
        return reply
