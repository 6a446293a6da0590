"""Stand-in processes for services whose real server is not in the tree: each serves the
service's read-only RPCs from a scenario file, plus gRPC health and Info like every dracpu
service (`dracpu.core.rpc.start_server`).

Run as `python standin_services.py SERVICE SOCKET SCENARIO.json`. The scenario holds the
protobuf messages as JSON (json_format), keyed by service:

  {"allocator": {"devices": DeviceList, "claims": [Claim], "shared_pool": SharedPool},
   "dra-plugin": {"status": PluginStatus},
   "nri-plugin": {"containers": [ContainerView], "status": PluginStatus}}
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from typing import Any

import grpc
from google.protobuf import json_format

from dracpu.core.cpuset import CPUSet
from dracpu.core.errors import NotFoundError
from dracpu.core.log import setup
from dracpu.core.metrics import build, exposition, service_registry
from dracpu.core.rpc import rpc_errors, start_server
from dracpu.pb.allocator.v1 import allocator_pb2, allocator_pb2_grpc
from dracpu.pb.dra_plugin.v1 import dra_plugin_pb2, dra_plugin_pb2_grpc
from dracpu.pb.nri_plugin.v1 import nri_plugin_pb2, nri_plugin_pb2_grpc


class Allocator(allocator_pb2_grpc.AllocatorServicer):  # type: ignore[misc]
    def __init__(self, scenario: dict[str, Any]) -> None:
        self.devices = json_format.ParseDict(scenario["devices"], allocator_pb2.DeviceList())
        self.claims = [json_format.ParseDict(c, allocator_pb2.Claim()) for c in scenario["claims"]]
        self.pool = json_format.ParseDict(scenario["shared_pool"], allocator_pb2.SharedPool())

    @rpc_errors
    async def ListDevices(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return self.devices

    @rpc_errors
    async def ListClaims(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        claims = [
            c for c in self.claims if not request.namespace or c.namespace == request.namespace
        ]
        return allocator_pb2.ClaimList(claims=claims, generation=len(self.claims))

    @rpc_errors
    async def GetClaim(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        for claim in self.claims:
            if claim.uid == request.claim_uid:
                return claim
        raise NotFoundError(f"claim {request.claim_uid} is not prepared")

    @rpc_errors
    async def GetSharedPool(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return self.pool

    @rpc_errors
    async def GetSummary(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return self.summary()

    def summary(self) -> Any:
        return allocator_pb2.Summary(
            allocated_cpus=len(CPUSet.parse(self.pool.exclusive)),
            available_cpus=len(CPUSet.parse(self.pool.cpus)),
            reserved_cpus=len(CPUSet.parse(self.pool.reserved)),
            active_claims=len(self.claims),
            online_cpus=len(CPUSet.parse(self.pool.online)),
        )


class DRAPluginView(dra_plugin_pb2_grpc.DRAPluginViewServicer):  # type: ignore[misc]
    def __init__(self, scenario: dict[str, Any]) -> None:
        self.status = json_format.ParseDict(scenario["status"], dra_plugin_pb2.PluginStatus())

    @rpc_errors
    async def GetStatus(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return self.status


class NRIPluginView(nri_plugin_pb2_grpc.NRIPluginViewServicer):  # type: ignore[misc]
    def __init__(self, scenario: dict[str, Any]) -> None:
        self.containers = [
            json_format.ParseDict(c, nri_plugin_pb2.ContainerView()) for c in scenario["containers"]
        ]
        self.status = json_format.ParseDict(scenario["status"], nri_plugin_pb2.PluginStatus())

    @rpc_errors
    async def ListContainers(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return nri_plugin_pb2.ContainerList(containers=self.containers)

    @rpc_errors
    async def GetStatus(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return self.status


async def serve(service: str, socket: str, scenario: dict[str, Any]) -> None:
    registry = service_registry()
    collectors = build(service, registry)
    part = scenario[service]
    if service == "allocator":
        allocator = Allocator(part)
        summary = allocator.summary()
        collectors["dra_cpu_allocated_cpus"].set(summary.allocated_cpus)  # type: ignore[union-attr]
        collectors["dra_cpu_available_cpus"].set(summary.available_cpus)  # type: ignore[union-attr]
        collectors["dra_cpu_reserved_cpus"].set(summary.reserved_cpus)  # type: ignore[union-attr]
        collectors["dra_cpu_resource_claims_active"].set(summary.active_claims)  # type: ignore[union-attr]

        def register(server: grpc.aio.Server) -> None:
            allocator_pb2_grpc.add_AllocatorServicer_to_server(allocator, server)

        api = "dracpu.allocator.v1"
    elif service == "dra-plugin":

        def register(server: grpc.aio.Server) -> None:
            dra_plugin_pb2_grpc.add_DRAPluginViewServicer_to_server(DRAPluginView(part), server)

        api = "dracpu.dra_plugin.v1"
    else:

        def register(server: grpc.aio.Server) -> None:
            nri_plugin_pb2_grpc.add_NRIPluginViewServicer_to_server(NRIPluginView(part), server)

        api = "dracpu.nri_plugin.v1"

    server, health = await start_server(
        socket, register, service=service, api_version=api, metrics=lambda: exposition(registry)
    )
    await health.set(True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()
    await server.stop(grace=0.5)


def main() -> int:
    service, socket, scenario_path = sys.argv[1:4]
    setup(0, service)
    with open(scenario_path, encoding="utf-8") as handle:
        scenario = json.load(handle)
    asyncio.run(serve(service, socket, scenario))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
