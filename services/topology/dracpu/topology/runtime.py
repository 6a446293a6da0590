"""The topology service at run time: discovery at start, the gRPC server over the Inventory
(SERVING once discovery succeeded), the kernel's uevents and the slow safety re-read, and the
stop on SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio

import grpc

from dracpu.core import __version__, footprint
from dracpu.core.config import load, log_effective
from dracpu.core.instance_lock import InstanceLock
from dracpu.core.log import get_logger
from dracpu.core.metrics import exposition, service_registry
from dracpu.core.rpc import check_socket_path, start_server, stop_server
from dracpu.core.signals import stop_event
from dracpu.core.supervisor import Supervisor
from dracpu.pb.topology.v1 import topology_pb2_grpc
from dracpu.topology.discovery import check_root, discover
from dracpu.topology.inventory import Inventory
from dracpu.topology.overlay import read as read_overlay
from dracpu.topology.servicer import TopologyServicer
from dracpu.topology.uevents import KernelEvents

SERVICE_NAME = "dracpu.topology.v1.Topology"
API_VERSION = "dracpu.topology.v1"

# The topology service's long-running loop: rediscovery at the kernel's uevents and every
# --watch-interval seconds.
LOOPS = ("sysfs-watch",)

log = get_logger(__name__)


async def serve(args: argparse.Namespace) -> int:
    check_socket_path(args.socket)
    config = load(args)
    root = config.effective_sysfs_root()
    # Refuse a bad root before logging anything, so bad input yields one line.
    check_root(root)
    overlay = read_overlay(config.sysfs_overlay)
    log_effective(config)
    log.info(0, "starting", version=__version__, socket=args.socket, sysfs_root=str(root))
    if overlay:
        log.info(0, "sysfs overlay applied", file=config.sysfs_overlay, paths=len(overlay.files))
    await InstanceLock.hold(args.socket, "topology")
    inventory = Inventory(root, await asyncio.to_thread(discover, root, overlay), overlay)

    def register(server: grpc.aio.Server) -> None:
        topology_pb2_grpc.add_TopologyServicer_to_server(TopologyServicer(inventory), server)

    # No dra_cpu_* metric of its own: the registry holds the process's standard collectors.
    registry = service_registry()
    loops = Supervisor("topology", registry=registry)
    server, health = await start_server(
        args.socket,
        register,
        service="topology",
        api_version=API_VERSION,
        health_names=[SERVICE_NAME],
        probe_address=args.probe_address,
        metrics=lambda: exposition(registry),
        supervisor=loops,
    )
    await health.set(True)
    footprint.settle()
    log.info(
        0,
        "serving",
        socket=args.socket,
        cpus=len(inventory.message.cpus),
        fingerprint=inventory.message.fingerprint,
    )

    stop = stop_event()
    kernel = KernelEvents()
    why = kernel.open()
    if why:
        log.info(0, "kernel uevents unavailable; re-reading sysfs periodically only",
                 reason=why, interval_s=args.watch_interval)  # fmt: skip
    seen = None if why else kernel.seen
    if seen is not None or args.watch_interval:
        loops.start("sysfs-watch", lambda: inventory.watch(seen, args.watch_interval))
    await stop.wait()
    await loops.stop()
    kernel.close()

    log.info(0, "stopping", socket=args.socket)
    await stop_server(server, health, args.socket)
    return 0
