"""The topology service at run time: the inventory it keeps and the gRPC servicer over it.

Health turns SERVING only once discovery succeeded; `Rediscover` re-reads sysfs and keeps the
previous inventory if the new read fails. Between calls the service watches the kernel's online,
isolated and nohz_full lists (three small reads per interval) and rediscovers when one changes.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path
from typing import Any

import grpc

from dracpu.core import __version__
from dracpu.core.config import load, log_effective
from dracpu.core.errors import DracpuError
from dracpu.core.log import get_logger
from dracpu.core.machine import Machine
from dracpu.core.rpc import check_socket_path, rpc_errors, start_server, stop_server
from dracpu.core.signals import stop_event
from dracpu.pb.topology.v1 import topology_pb2, topology_pb2_grpc
from dracpu.topology.discovery import CPU_DIR, check_root, discover
from dracpu.topology.sysfs import SysfsReader

SERVICE_NAME = "dracpu.topology.v1.Topology"
# The files whose change means the inventory may have changed.
WATCHED = ("online", "isolated", "nohz_full")
API_VERSION = "dracpu.topology.v1"

log = get_logger("topology")


class Inventory:
    """The current discovery result; replaced as a whole, so readers never see a mix."""

    def __init__(self, root: Path, machine: Machine) -> None:
        self.root = root
        self._lock = asyncio.Lock()
        self._message = self._encode(machine)

    @staticmethod
    def _encode(machine: Machine) -> topology_pb2.Inventory:
        message = machine.to_proto()
        message.discovered_at_unix = int(time.time())
        return message

    @property
    def message(self) -> topology_pb2.Inventory:
        return self._message

    async def rediscover(self) -> topology_pb2.Inventory:
        async with self._lock:
            previous = self._message.fingerprint
            machine = await asyncio.to_thread(discover, self.root)
            self._message = self._encode(machine)
            if machine.fingerprint != previous:
                log.info(0, "inventory changed", previous=previous, fingerprint=machine.fingerprint)
            return self._message

    def _watched(self, reader: SysfsReader) -> tuple[str, ...]:
        return tuple(str(reader.text(f"{CPU_DIR}/{name}")) for name in WATCHED)

    async def watch(self, interval: float) -> None:
        """Rediscover whenever a watched list changes; a failed read keeps the last inventory
        (callers of Rediscover see the error) and is retried at the next change."""
        reader = SysfsReader(self.root)
        last = self._watched(reader)
        while True:
            await asyncio.sleep(interval)
            seen = self._watched(reader)
            if seen == last:
                continue
            last = seen
            try:
                await self.rediscover()
            except DracpuError as exc:
                log.warning("topology refresh failed; keeping the last inventory", error=str(exc))


class TopologyServicer(topology_pb2_grpc.TopologyServicer):  # type: ignore[misc]
    def __init__(self, inventory: Inventory) -> None:
        self._inventory = inventory

    @rpc_errors
    async def GetInventory(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return self._inventory.message

    @rpc_errors
    async def Rediscover(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return await self._inventory.rediscover()


async def serve(args: argparse.Namespace) -> int:
    check_socket_path(args.socket)
    config = load(args)
    root = config.effective_sysfs_root()
    # Refuse a bad root before logging anything, so bad input yields one line.
    check_root(root)
    log_effective(config)
    log.info(0, "starting", version=__version__, socket=args.socket, sysfs_root=str(root))
    inventory = Inventory(root, await asyncio.to_thread(discover, root))

    def register(server: grpc.aio.Server) -> None:
        topology_pb2_grpc.add_TopologyServicer_to_server(TopologyServicer(inventory), server)

    server, health = await start_server(
        args.socket,
        register,
        service="topology",
        api_version=API_VERSION,
        health_names=[SERVICE_NAME],
    )
    await health.set(True)
    log.info(
        0,
        "serving",
        socket=args.socket,
        cpus=len(inventory.message.cpus),
        fingerprint=inventory.message.fingerprint,
    )

    stop = stop_event()
    watch = (
        asyncio.create_task(inventory.watch(args.watch_interval)) if args.watch_interval else None
    )
    await stop.wait()
    if watch is not None:
        watch.cancel()

    log.info(0, "stopping", socket=args.socket)
    await stop_server(server, health, args.socket)
    return 0
