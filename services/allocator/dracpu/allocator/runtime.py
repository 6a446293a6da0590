"""The allocator service at run time: the node allocator behind its two sockets, the
mutating one and the read-only one, kept in step with the topology service."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from dracpu.allocator import algorithm
from dracpu.allocator.domain.devices import DeviceOptions
from dracpu.allocator.live.node import NodeAllocator
from dracpu.allocator.rpc import topology_client
from dracpu.allocator.servicer import (
    API_VERSION,
    SERVICE_NAME,
    AllocatorServicer,
    ReadOnlyAllocatorServicer,
)
from dracpu.core import config as driver_config
from dracpu.core import footprint, operation
from dracpu.core.cpuset import CPUSet
from dracpu.core.errors import ConfigError, DracpuError, UnimplementedError
from dracpu.core.instance_lock import InstanceLock
from dracpu.core.log import get_logger
from dracpu.core.machine import Machine
from dracpu.core.metrics import exposition, service_registry
from dracpu.core.retry import Backoff
from dracpu.core.rpc import check_socket_path, start_server, stop_server
from dracpu.core.signals import stop_event
from dracpu.core.sockets import ALLOCATOR_READ_ONLY_SOCKET
from dracpu.core.supervisor import Supervisor
from dracpu.pb.allocator.v1 import allocator_pb2_grpc

log = get_logger(__name__)

# The allocator's long-running loop (with a topology socket and --topology-refresh > 0): the
# topology service's inventory followed as it changes.
LOOPS = ("topology-refresh",)


async def _follow_topology(node: NodeAllocator, socket: str, fallback: float) -> None:
    """Apply every inventory the topology service pushes. A stream that breaks is opened again
    with backoff; failing to open it makes the devices Unknown until it opens. A topology
    service of an older release has no watch: it is asked to rediscover every `fallback`
    seconds instead, until an error (it restarted, perhaps a newer release)."""
    backoff = Backoff(initial=0.2, maximum=5.0)
    while True:
        received = False
        try:
            async for machine in topology_client.watch(socket):
                received = True
                backoff.reset()
                if isinstance(machine, str):
                    log.info(2, "the topology service cannot read sysfs", error=machine)
                    await node.topology_unreadable(machine)
                    continue
                # Each change is one operation: the topology service's lines carry its opID.
                with operation.bound(operation.new_id()):
                    await _apply(node, machine)
            error = "the topology service ended the watch"
        except UnimplementedError:
            log.info(0, "the topology service has no watch (an older release); asking it to "
                     "rediscover periodically instead", interval_s=fallback)  # fmt: skip
            await _refresh_loop(node, socket, fallback)
            continue
        except DracpuError as exc:
            error = str(exc)
            if not received:
                await node.topology_unreadable(error)
        delay = backoff.next_delay()
        log.info(2, "topology watch ended; opening it again", error=error, retry_in=delay)
        await asyncio.sleep(delay)


async def _refresh_loop(node: NodeAllocator, socket: str, interval: float) -> None:
    """Rediscover every `interval` seconds until a refresh fails."""
    while True:
        await asyncio.sleep(interval)
        # Each refresh is one operation: the topology service's lines for it carry its opID.
        with operation.bound(operation.new_id()):
            if not await _refresh(node, socket):
                return


async def _refresh(node: NodeAllocator, socket: str) -> bool:
    try:
        machine = await topology_client.fetch(socket, rediscover=True)
    except DracpuError as exc:
        log.info(2, "topology refresh failed; keeping the current inventory", error=str(exc))
        await node.topology_unreadable(str(exc))
        return False
    await _apply(node, machine)
    return True


async def _apply(node: NodeAllocator, machine: Machine) -> None:
    try:
        await node.update_topology(machine)
    except DracpuError as exc:
        log.error("cannot apply the refreshed topology", error=str(exc))


# The mutating socket is for the dra-plugin and nri-plugin only: in the chart they run as
# the socket's owner (uid 0) while the api and topology run as 65532 and reach it through the
# group, which this mode leaves out. The read-only socket keeps the group.
MUTATING_MODE = 0o600
READ_ONLY_MODE = 0o660


def read_only_socket(args: argparse.Namespace) -> str:
    if args.read_only_socket:
        return str(args.read_only_socket)
    return str(Path(args.socket).with_name(ALLOCATOR_READ_ONLY_SOCKET))


def check_reserved(reserved: CPUSet, machine: Machine) -> None:
    """reservedCPUs against this node's CPUs: said loudly, not refused (the same file may
    configure nodes of several shapes, and a refusal would only restart the allocator)."""
    missing = reserved - machine.cpu_set
    if missing:
        log.warning("reservedCPUs names CPUs this node does not have", cpus=missing.format())
    if machine.online and not machine.online - reserved:
        log.error(
            "reservedCPUs covers every online CPU: no CPU is left for claims or for shared "
            "containers",
            reserved=reserved.format(),
            online=machine.online.format(),
        )


def _device_options(config: driver_config.DriverConfig, args: argparse.Namespace) -> DeviceOptions:
    return DeviceOptions(
        mode=config.cpu_device_mode,
        group_by=config.group_by,
        allocator=config.allocator,
        reserved=config.reserved,
        expose_pcie_roots=args.expose_pcie_roots,
        node_allocatable_mapping=config.publish_node_allocatable_resource_mapping,
        min_shared=config.min_shared_cpus,
        memory_placement=config.memory_placement,
        publish_memory=config.publish_memory_devices,
    )


async def _inventory_or_stop(socket: str, stop: asyncio.Event) -> Machine | None:
    """The topology service's inventory once it answers; None when asked to stop first."""
    waiting = asyncio.ensure_future(topology_client.wait_for_inventory(socket))
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait({waiting, stopping}, return_when=asyncio.FIRST_COMPLETED)
    if not waiting.done():
        waiting.cancel()
        return None
    stopping.cancel()
    return waiting.result()


async def serve(args: argparse.Namespace) -> int:
    check_socket_path(args.socket)
    ro_socket = check_socket_path(read_only_socket(args))
    if Path(ro_socket) == Path(args.socket):
        raise ConfigError("--read-only-socket must differ from --socket")
    config = driver_config.load(args)
    options = _device_options(config, args)
    machine_from_file: Machine | None = None
    if args.topology_file:
        machine_from_file = topology_client.load_file(args.topology_file)
    # Bad input is refused above, before any log line, so it reads as one stderr line.
    driver_config.log_effective(config)
    driver_config.warn_deprecated(config)
    # Before the state folder is read: a second allocator must not touch it.
    await InstanceLock.hold(args.socket, "allocator")
    registry = service_registry()
    node = NodeAllocator(
        state_dir=Path(args.state_dir),
        cdi_dir=Path(args.cdi_dir),
        options=options,
        registry=registry,
    )
    servicer = AllocatorServicer(node)
    loops = Supervisor("allocator", registry=registry)
    server, health = await start_server(
        args.socket,
        lambda s: allocator_pb2_grpc.add_AllocatorServicer_to_server(servicer, s),
        service="allocator",
        api_version=API_VERSION,
        health_names=[SERVICE_NAME],
        metrics=lambda: exposition(registry),
        mode=MUTATING_MODE,
        probe_address=args.probe_address,
        supervisor=loops,
    )
    reader = ReadOnlyAllocatorServicer(node)
    try:
        ro_server, ro_health = await start_server(
            ro_socket,
            lambda s: allocator_pb2_grpc.add_AllocatorServicer_to_server(reader, s),
            service="allocator",
            api_version=API_VERSION,
            health_names=[SERVICE_NAME],
            metrics=lambda: exposition(registry),
            mode=READ_ONLY_MODE,
            supervisor=loops,
        )
    except BaseException:
        await stop_server(server, health, args.socket)
        raise
    stop = stop_event()
    try:
        if machine_from_file is not None:
            machine = machine_from_file
        else:
            waited = await _inventory_or_stop(args.topology_socket, stop)
            if waited is None:
                return 0
            machine = waited
        check_reserved(config.reserved, machine)
        await node.start(machine)
        await health.set(True)
        await ro_health.set(True)
        footprint.settle()
        log.info(
            0,
            "allocator serving",
            socket=args.socket,
            cpus=len(machine.cpus),
            algorithm=algorithm.VARIANT,
        )
        if machine_from_file is None and args.topology_refresh > 0:
            loops.start(
                "topology-refresh",
                lambda: _follow_topology(node, args.topology_socket, args.topology_refresh),
            )
        await stop.wait()
    finally:
        await loops.stop()
        await stop_server(ro_server, ro_health, ro_socket)
        await stop_server(server, health, args.socket)
        log.info(0, "allocator stopped")
    return 0
