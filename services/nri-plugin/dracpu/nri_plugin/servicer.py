"""The nri-plugin's gRPC servicer: `dracpu.nri_plugin.v1.NRIPluginView`, what the api sidecar
shows of this service."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc

from dracpu.core.prerequisites import Prerequisites
from dracpu.core.rpc import rpc_errors
from dracpu.nri_plugin.cpu_plugin import CPUPlugin
from dracpu.nri_plugin.transport.stub import PluginStub
from dracpu.pb.nri_plugin.v1 import nri_plugin_pb2, nri_plugin_pb2_grpc


class NRIPluginView(nri_plugin_pb2_grpc.NRIPluginViewServicer):  # type: ignore[misc]
    def __init__(self, plugin: CPUPlugin, stub: PluginStub) -> None:
        self._plugin = plugin
        self._stub = stub

    @rpc_errors
    async def ListContainers(
        self, request: nri_plugin_pb2.ListContainersRequest, context: grpc.aio.ServicerContext
    ) -> nri_plugin_pb2.ContainerList:
        return nri_plugin_pb2.ContainerList(
            containers=[
                nri_plugin_pb2.ContainerView(
                    **r.container.fields(),
                    claim_uids=list(r.claims),
                    cpus=r.cpus.format() if r.confirmed else "",
                    exclusive=r.exclusive,
                    state=r.state,
                    claimed_cpus=r.own.format(),
                )
                for r in self._plugin.registry
            ]
        )

    @rpc_errors
    async def GetStatus(
        self, request: nri_plugin_pb2.GetStatusRequest, context: grpc.aio.ServicerContext
    ) -> nri_plugin_pb2.PluginStatus:
        status = self._stub.status
        runtime = status.runtime
        checks = self._plugin.state.prerequisites
        return nri_plugin_pb2.PluginStatus(
            connected=status.connected,
            runtime_name=runtime.name if runtime else "",
            runtime_version=runtime.version if runtime else "",
            socket=self._stub.socket_path,
            last_error=status.last_error,
            unsolicited_updates=self._plugin.unsolicited.enabled,
            synchronized_at_unix=int(status.synchronized_at),
            shared_pool=pool.format() if (pool := self._plugin.shared_pool) is not None else "",
            shared_pool_generation=max(self._plugin.pool_generation, 0),
            prerequisites=checks.prerequisites.protos() if checks is not None else [],
        )

    @rpc_errors
    async def WatchPrerequisites(
        self,
        request: nri_plugin_pb2.WatchPrerequisitesRequest,
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[nri_plugin_pb2.PrerequisiteList]:
        checks = self._plugin.state.prerequisites
        # Nothing judged here (no checks): an empty list, which never changes.
        verdicts = checks.prerequisites if checks is not None else Prerequisites()
        while True:
            changed = verdicts.changes.next()
            yield nri_plugin_pb2.PrerequisiteList(prerequisites=verdicts.protos())
            await changed.wait()
