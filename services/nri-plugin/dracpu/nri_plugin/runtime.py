"""The nri-plugin at run time: the NRI connection to the runtime, the CPU plugin behind it, and
the read-only gRPC view with its health."""

from __future__ import annotations

import argparse
import os

import grpc

from dracpu.core import __version__, footprint
from dracpu.core.clients.allocator import AllocatorClient
from dracpu.core.config import load, log_effective
from dracpu.core.driver import DRIVER_NAME
from dracpu.core.errors import DracpuError
from dracpu.core.instance_lock import InstanceLock
from dracpu.core.log import get_logger
from dracpu.core.prerequisites import Prerequisites
from dracpu.core.rpc import check_socket_path, start_server, stop_server
from dracpu.core.signals import stop_event
from dracpu.core.supervisor import Supervisor
from dracpu.nri_plugin.cpu_plugin import CPUPlugin
from dracpu.nri_plugin.servicer import NRIPluginView
from dracpu.nri_plugin.state.pacing import ALLOCATOR_CALL_TIMEOUT
from dracpu.nri_plugin.state.plugin_metrics import NRIMetrics
from dracpu.nri_plugin.transport.compat import UnsolicitedMode
from dracpu.nri_plugin.transport.cri_version import RuntimeIdentity, query
from dracpu.nri_plugin.transport.runtime_prerequisites import RuntimePrerequisites, nri_off_line
from dracpu.nri_plugin.transport.stub import PluginStub
from dracpu.pb.nri_plugin.v1 import nri_plugin_pb2_grpc

SERVICE_NAME = "dracpu.nri_plugin.v1.NRIPluginView"
API_VERSION = "dracpu.nri_plugin.v1"

# The nri-plugin's long-running loops, by the names the supervisor, its log and its metrics
# give them.
LOOPS = (
    "nri-connection",
    "shared-pool-watch",
    "shared-pool-push",
    "detach-retry",
    "unanswered-retry",
    "adopted-moves",
    "health",
)

log = get_logger(__name__)


async def runtime_identity(cri_socket: str) -> tuple[RuntimeIdentity | None, str]:
    """The runtime named by its CRI socket's Version call, or None and why not."""
    if not cri_socket:
        return None, "no --cri-socket to ask its name and version"
    try:
        return await query(cri_socket), ""
    except grpc.RpcError as exc:
        code = exc.code() if isinstance(exc, grpc.aio.AioRpcError) else None
        name = code.name if code is not None else type(exc).__name__
        return None, f"its CRI socket {cri_socket} did not answer Version: {name}"
    except DracpuError as exc:
        return None, f"its CRI socket {cri_socket} answered Version garbled: {exc}"


async def serve(args: argparse.Namespace) -> int:
    mode = UnsolicitedMode.parse(args.unsolicited_updates)
    check_socket_path(args.socket)
    check_socket_path(args.nri_socket)
    config = load(args)
    log_effective(config)
    log.info(
        0,
        "starting",
        version=__version__,
        socket=args.socket,
        nri_socket=args.nri_socket,
        allocator=args.allocator_socket,
        unsolicited_updates=mode.value,
    )

    # Before registering with the runtime: two registrations under one name make it refuse
    # every container.
    await InstanceLock.hold(args.socket, "nri-plugin")
    allocator = AllocatorClient(args.allocator_socket, timeout=ALLOCATOR_CALL_TIMEOUT)
    metrics = NRIMetrics()
    checks = RuntimePrerequisites(Prerequisites(), args.nri_socket)
    if not os.path.exists(args.nri_socket):
        checks.runtime, why_unnamed = await runtime_identity(args.cri_socket)
        log.error(nri_off_line(args.nri_socket, checks.runtime, why_unnamed))
    plugin = CPUPlugin(allocator, unsolicited=mode, metrics=metrics, prerequisites=checks)
    stub = PluginStub(args.nri_socket, plugin, name=DRIVER_NAME, index=args.nri_plugin_index,
                      prerequisites=checks)  # fmt: skip
    plugin.set_pusher(stub.update_containers)
    plugin.set_resynchronizer(stub.resynchronize)

    loops = Supervisor("nri-plugin", registry=metrics.registry)

    def register(server: grpc.aio.Server) -> None:
        nri_plugin_pb2_grpc.add_NRIPluginViewServicer_to_server(NRIPluginView(plugin, stub), server)

    server, health = await start_server(
        args.socket,
        register,
        service="nri-plugin",
        api_version=API_VERSION,
        health_names=[SERVICE_NAME],
        metrics=metrics.text,
        probe_address=args.probe_address,
        supervisor=loops,
    )

    async def follow_health() -> None:
        serving = False
        while True:
            serving = await stub.wait_ready_change(serving)
            await health.set(serving)

    async def connect() -> None:
        await plugin.wait_for_allocator()
        await stub.run()

    loops.start("nri-connection", connect)
    loops.start("shared-pool-watch", plugin.watch_pool)
    loops.start("shared-pool-push", plugin.push_pool_changes)
    loops.start("detach-retry", plugin.detaches.run)
    loops.start("unanswered-retry", plugin.unanswered.run)
    loops.start("adopted-moves", plugin.move_adopted)
    loops.start("health", follow_health)
    footprint.settle()

    stop = stop_event()
    await stop.wait()

    log.info(0, "stopping", socket=args.socket)
    stub.stop()
    await loops.stop()
    await stop_server(server, health, args.socket)
    await allocator.close()
    return 0
