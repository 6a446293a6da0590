"""The nri-plugin service: registers with the runtime over NRI as `dra.cpu` (index 00), pins
containers' cpusets from the allocator's answers, and serves a read-only view over gRPC.

Health is SERVING while the plugin is registered and synchronized with the runtime; the gRPC
view keeps answering while it reconnects.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import grpc

from dracpu.core import __version__
from dracpu.core import log as logging_setup
from dracpu.core.cli import ArgumentParser, run_async
from dracpu.core.config import add_config_flags, load, log_effective
from dracpu.core.log import get_logger
from dracpu.core.rpc import DEFAULT_SOCKETS, check_socket_path, start_server, stop_server
from dracpu.core.signals import stop_event
from dracpu.nri_plugin.allocator_client import AllocatorClient
from dracpu.nri_plugin.compat import UnsolicitedMode
from dracpu.nri_plugin.cpu_plugin import CPUPlugin
from dracpu.nri_plugin.events import valid_plugin_index
from dracpu.nri_plugin.plugin_metrics import NRIMetrics
from dracpu.nri_plugin.stub import DEFAULT_NRI_SOCKET, PluginStub
from dracpu.nri_plugin.view import NRIPluginView
from dracpu.pb.nri_plugin.v1 import nri_plugin_pb2_grpc

PROG = "dracpu-nri-plugin"
SERVICE_NAME = "dracpu.nri_plugin.v1.NRIPluginView"
API_VERSION = "dracpu.nri_plugin.v1"
PLUGIN_NAME = "dra.cpu"

log = get_logger("nri")


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog=PROG, description="Pin container cpusets through NRI.")
    parser.add_argument(
        "--socket",
        default=DEFAULT_SOCKETS["nri-plugin"],
        metavar="PATH",
        help=f"unix socket of the gRPC view (default {DEFAULT_SOCKETS['nri-plugin']})",
    )
    parser.add_argument(
        "--allocator-socket",
        default=DEFAULT_SOCKETS["allocator"],
        metavar="PATH",
        help=f"allocator socket (default {DEFAULT_SOCKETS['allocator']})",
    )
    parser.add_argument(
        "--nri-socket",
        default=DEFAULT_NRI_SOCKET,
        metavar="PATH",
        help=f"the runtime's NRI socket (default {DEFAULT_NRI_SOCKET})",
    )
    parser.add_argument(
        "--nri-plugin-index",
        default="00",
        metavar="NN",
        help="two-digit NRI plugin index; plugins run in ascending order (default 00)",
    )
    parser.add_argument(
        "--unsolicited-updates",
        default="auto",
        metavar="auto|on|off",
        help="push shared-pool growth with UpdateContainers: auto decides from the runtime's "
        "name and version (see README), on/off force it (default auto)",
    )
    add_config_flags(parser)
    return parser


async def serve(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not 0 <= args.verbosity <= 10:
        parser.error(f"argument -v: verbosity must be 0-10, got {args.verbosity}")
    if not valid_plugin_index(args.nri_plugin_index):
        parser.error(f"argument --nri-plugin-index: {args.nri_plugin_index!r} is not two digits")
    mode = UnsolicitedMode.parse(args.unsolicited_updates)
    check_socket_path(args.socket)
    check_socket_path(args.nri_socket)
    logging_setup.setup(args.verbosity, "nri-plugin")
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

    allocator = AllocatorClient(args.allocator_socket)
    metrics = NRIMetrics()
    plugin = CPUPlugin(allocator, unsolicited=mode, metrics=metrics)
    stub = PluginStub(args.nri_socket, plugin, name=PLUGIN_NAME, index=args.nri_plugin_index)
    plugin.set_pusher(stub.update_containers)

    def register(server: grpc.aio.Server) -> None:
        nri_plugin_pb2_grpc.add_NRIPluginViewServicer_to_server(NRIPluginView(plugin, stub), server)

    server, health = await start_server(
        args.socket,
        register,
        service="nri-plugin",
        api_version=API_VERSION,
        health_names=[SERVICE_NAME],
        metrics=metrics.text,
    )

    async def follow_health() -> None:
        serving = False
        while True:
            serving = await stub.wait_ready_change(serving)
            await health.set(serving)

    async def connect() -> None:
        await plugin.wait_for_allocator()
        await stub.run()

    tasks = [
        asyncio.create_task(connect(), name="nri-connection"),
        asyncio.create_task(plugin.watch_pool(), name="shared-pool-watch"),
        asyncio.create_task(plugin.push_pool_changes(), name="shared-pool-push"),
        asyncio.create_task(follow_health(), name="health"),
    ]

    stop = stop_event()
    await stop.wait()

    log.info(0, "stopping", socket=args.socket)
    stub.stop()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await stop_server(server, health, args.socket)
    await allocator.close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_async(lambda: serve(argv), PROG)


if __name__ == "__main__":
    raise SystemExit(main())
