"""The nri-plugin's view service's client: its containers and its status (with the NRI and CDI
prerequisite verdicts), read by the api and by the dra-plugin."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc

from dracpu.core import rpc
from dracpu.core.clients.base import ServiceClient
from dracpu.pb.nri_plugin.v1 import nri_plugin_pb2, nri_plugin_pb2_grpc


class NRIPluginClient(ServiceClient):
    service = "nri-plugin"

    def _make_stub(self, channel: grpc.aio.Channel) -> Any:
        return nri_plugin_pb2_grpc.NRIPluginViewStub(channel)

    async def containers(self) -> nri_plugin_pb2.ContainerList:
        reply: nri_plugin_pb2.ContainerList = await self.unary(
            "NRIPluginView.ListContainers",
            lambda stub, t: stub.ListContainers(
                nri_plugin_pb2.ListContainersRequest(),
                timeout=t,
                wait_for_ready=self.wait_for_ready,
            ),
        )
        return reply

    async def status(self) -> nri_plugin_pb2.PluginStatus:
        reply: nri_plugin_pb2.PluginStatus = await self.unary(
            "NRIPluginView.GetStatus",
            lambda stub, t: stub.GetStatus(
                nri_plugin_pb2.GetStatusRequest(), timeout=t, wait_for_ready=self.wait_for_ready
            ),
        )
        return reply

    async def watch_prerequisites(self) -> AsyncIterator[nri_plugin_pb2.PrerequisiteList]:
        """The prerequisite verdicts now and at every change; an nri-plugin of an older
        release raises `UnimplementedError`."""
        call = self.stub.WatchPrerequisites(
            nri_plugin_pb2.WatchPrerequisitesRequest(), wait_for_ready=self.wait_for_ready
        )
        async for verdicts in rpc.stream(call, "watch the prerequisites"):
            yield verdicts
