"""The dra-plugin at run time: its three gRPC servers (the DRA endpoint, registration, the
read-only view) and the tasks that publish slices, resend device health, write claims'
status.devices, follow the kubelet's registration and put missing prerequisites (its own and
the nri-plugin's) on the driver's pod as Events.

`serve` builds the plugin's parts from its flags and config (`_build`), starts the DRA
endpoint and the view (`_start_servers`) and the long-running loops under its supervisor
(`_start_loops`, `dracpu.core.supervisor`), and registers with the kubelet last, once the
allocator's devices are in (`_register`); on SIGTERM or SIGINT it takes them down in order
(`_shutdown`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import grpc
from grpc_health.v1 import health_pb2

from dracpu.core import config as driver_config
from dracpu.core import footprint
from dracpu.core.clients.allocator import AllocatorClient
from dracpu.core.driver import DRIVER_NAME
from dracpu.core.errors import DracpuError, UnavailableError
from dracpu.core.instance_lock import InstanceLock
from dracpu.core.log import get_logger
from dracpu.core.prerequisites import Prerequisites
from dracpu.core.rpc import Health, start_server
from dracpu.core.signals import stop_event
from dracpu.core.supervisor import Supervisor
from dracpu.core.tasks import within
from dracpu.dra_plugin.cluster.api_features import FeatureSupport
from dracpu.dra_plugin.cluster.api_prerequisites import APIPrerequisites
from dracpu.dra_plugin.cluster.objects import Cluster
from dracpu.dra_plugin.cluster.pod_events import PodEvents, PodIdentity
from dracpu.dra_plugin.cluster.status_writer import ClaimStatusWriter
from dracpu.dra_plugin.common.device_feed import DeviceFeed
from dracpu.dra_plugin.common.intervals import ALLOCATOR_DEADLINE, REGISTER_AFTER_DEVICES_MAX
from dracpu.dra_plugin.common.nri_status import follow_nri_prerequisites
from dracpu.dra_plugin.common.plugin_metrics import PluginMetrics
from dracpu.dra_plugin.common.waits import wait_any
from dracpu.dra_plugin.kubelet.health import DeviceHealth
from dracpu.dra_plugin.kubelet.metadata import MetadataWriter
from dracpu.dra_plugin.kubelet.node_service import NodeService
from dracpu.dra_plugin.kubelet.registration import PluginRegistration
from dracpu.dra_plugin.kubelet.resource_managers import ResourceManagers
from dracpu.dra_plugin.paths import KubeletPaths
from dracpu.dra_plugin.publishing.publisher import SlicePublisher
from dracpu.dra_plugin.publishing.slice_watch import SliceWatch
from dracpu.dra_plugin.servicer import (
    DRA_SERVICES,
    HEALTH_SERVICES,
    PluginView,
    Registration,
    add_kubelet_services,
)
from dracpu.pb.dra_plugin.v1 import dra_plugin_pb2_grpc
from dracpu.pb.kubelet.pluginregistration.v1 import api_pb2_grpc as registration_grpc

if TYPE_CHECKING:
    from dracpu.dra_plugin.cluster.apiserver import KubernetesAPI

log = get_logger(__name__)

API_VERSION = "dracpu.dra_plugin.v1"
VIEW_SERVICE = "dracpu.dra_plugin.v1.DRAPluginView"
REGISTRATION_HEALTH = "kubelet-registration"
STATUS_FLUSH = 5.0  # seconds


@dataclass
class Plugin:
    """The parts of a running dra-plugin, built once from its flags and config."""

    node: str
    paths: KubeletPaths
    cluster: Cluster
    api: KubernetesAPI
    metrics: PluginMetrics
    allocator: AllocatorClient
    devices: DeviceFeed
    device_health: DeviceHealth
    node_service: NodeService
    registration: PluginRegistration
    publisher: SlicePublisher
    status: ClaimStatusWriter
    events: PodEvents


@dataclass
class Servers:
    """The three gRPC servers, and the view's health (it carries the registration status);
    the registration server is started last (`_register`)."""

    dra: grpc.aio.Server
    view: grpc.aio.Server
    view_health: Health
    registration: grpc.aio.Server | None = None


def _build(args: argparse.Namespace) -> Plugin:
    cfg = driver_config.load(args)
    paths = KubeletPaths(Path(args.kubelet_root_dir).absolute())
    paths.check()
    driver_config.log_effective(cfg)
    node = cfg.node_name()
    from dracpu.dra_plugin.cluster.apiserver import KubernetesAPI  # heavy: not for --help

    api = KubernetesAPI(cfg.kubeconfig)
    cluster: Cluster = api
    watch = SliceWatch(api, DRIVER_NAME, node)

    metrics = PluginMetrics()
    events = PodEvents(api, PodIdentity.from_env(), node)
    verdicts = Prerequisites(on_change=lambda v: events.report("dra-plugin", v))
    checks = APIPrerequisites(api, verdicts, driver=DRIVER_NAME, node=node)
    features = FeatureSupport(on_missing=lambda m: metrics.feature_missing(m.name))
    allocator = AllocatorClient(args.allocator_socket, deadline=ALLOCATOR_DEADLINE)
    devices = DeviceFeed(allocator, args.poll_interval)
    device_health = DeviceHealth(node, args.health_interval)
    status = ClaimStatusWriter(
        cluster, driver=DRIVER_NAME, node=node, features=features, metrics=metrics
    )
    node_service = NodeService(
        driver=DRIVER_NAME,
        cluster=cluster,
        allocator=allocator,
        metadata=MetadataWriter(
            DRIVER_NAME, paths.metadata_dir, Path(args.cdi_dir), args.metadata_versions
        ),
        metrics=metrics,
        status=status,
    )
    registration = PluginRegistration(
        DRIVER_NAME, paths.dra_socket, [*DRA_SERVICES, *HEALTH_SERVICES]
    )
    publisher = SlicePublisher(
        driver=DRIVER_NAME,
        node=node,
        cluster=cluster,
        feed=devices,
        poll_interval=args.poll_interval,
        on_devices=device_health.set_devices,
        resync_interval=args.resync_interval,
        watch=watch,
        features=features,
        prerequisites=checks,
        resource_managers=ResourceManagers(paths.root, verdicts),
    )
    return Plugin(
        node=node,
        paths=paths,
        cluster=cluster,
        api=api,
        metrics=metrics,
        allocator=allocator,
        devices=devices,
        device_health=device_health,
        node_service=node_service,
        registration=registration,
        publisher=publisher,
        status=status,
        events=events,
    )


async def _start_servers(args: argparse.Namespace, plugin: Plugin, loops: Supervisor) -> Servers:
    paths = plugin.paths
    try:
        paths.plugin_dir.mkdir(parents=True, exist_ok=True, mode=0o750)
        paths.registrar_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UnavailableError(
            f"cannot listen on {paths.dra_socket}: {exc.filename}: {exc.strerror or exc}"
        ) from exc

    # The DRA endpoint must be live before the kubelet learns of it.
    dra_server, dra_health = await start_server(
        paths.dra_socket,
        lambda s: add_kubelet_services(s, plugin.node_service, plugin.device_health),
        service="dra-plugin",
        api_version=API_VERSION,
    )
    await dra_health.set(True)
    view = PluginView(
        plugin.node, paths, plugin.registration, plugin.publisher, plugin.cluster, plugin.status
    )
    view_server, view_health = await start_server(
        args.socket,
        lambda s: dra_plugin_pb2_grpc.add_DRAPluginViewServicer_to_server(view, s),
        service="dra-plugin",
        api_version=API_VERSION,
        health_names=[VIEW_SERVICE],
        metrics=plugin.metrics.exposition,
        probe_address=args.probe_address,
        supervisor=loops,
    )
    await view_health.set(True)
    return Servers(dra_server, view_server, view_health)


async def _register(plugin: Plugin, servers: Servers, stop: asyncio.Event) -> None:
    """The registration socket, last: the kubelet asks GetInfo as soon as it appears and gives
    the answer one second, so it appears once the plugin is past its start (its loops started,
    the allocator's devices in, or REGISTER_AFTER_DEVICES_MAX without them). Told to stop
    before that, it never appears."""
    changed = plugin.devices.changes.next()
    if plugin.devices.latest is None:
        await wait_any((changed, stop), REGISTER_AFTER_DEVICES_MAX)
        if stop.is_set():
            return
    paths = plugin.paths
    servers.registration, reg_health = await start_server(
        paths.registration_socket,
        lambda s: registration_grpc.add_RegistrationServicer_to_server(
            Registration(plugin.registration), s
        ),
        service="dra-plugin",
        api_version=API_VERSION,
    )
    await reg_health.set(True)
    footprint.settle()
    log.info(
        2,
        "dra-plugin serving",
        node=plugin.node,
        registration=str(paths.registration_socket),
        dra=str(paths.dra_socket),
        claims=plugin.cluster.describe(),
        devices="in" if plugin.devices.latest is not None else "not yet",
    )


async def _track_registration(registration: PluginRegistration, view_health: Health) -> None:
    """Mirror the kubelet's registration outcome in the view's kubelet-registration health."""
    serving = health_pb2.HealthCheckResponse.SERVING
    not_serving = health_pb2.HealthCheckResponse.NOT_SERVING
    while True:
        changed = registration.changed
        status = serving if registration.state.registered else not_serving
        await view_health.servicer.set(REGISTRATION_HEALTH, status)
        await changed.wait()


# The dra-plugin's long-running loops, by the names the supervisor, its log and its metrics give
# them; nri-prerequisites only runs where Events can be written (an API server and POD_NAME).
LOOPS = (
    "registration-watchdog",
    "device-feed",
    "slice-publisher",
    "claim-status",
    "claim-status-catch-up",
    "registration-health",
    "device-health",
    "pod-events",
    "nri-prerequisites",
)


def _start_loops(
    args: argparse.Namespace, plugin: Plugin, servers: Servers, loops: Supervisor
) -> None:
    registration = plugin.registration
    loops.start(
        "registration-watchdog",
        lambda: registration.watchdog(plugin.paths.registrar_dir, args.registration_timeout),
        once=True,
    )
    loops.start("device-feed", plugin.devices.run)
    loops.start("slice-publisher", plugin.publisher.run)
    loops.start("claim-status", plugin.status.run)
    loops.start("claim-status-catch-up", lambda: _catch_up(plugin), once=True)
    loops.start(
        "registration-health", lambda: _track_registration(registration, servers.view_health)
    )
    loops.start("device-health", lambda: plugin.device_health.follow(plugin.devices))
    loops.start("pod-events", plugin.events.run)
    if plugin.events.writable:
        loops.start(
            "nri-prerequisites",
            lambda: follow_nri_prerequisites(
                args.nri_plugin_socket, lambda verdict: plugin.events.report("nri-plugin", verdict)
            ),
        )


async def _catch_up(plugin: Plugin) -> None:
    """Claim status writes a stopped plugin left undone; the kubelet does not prepare again."""
    try:
        await plugin.node_service.catch_up(plugin.node)
    except DracpuError as exc:
        log.warning("claim device status not caught up after the start", error=str(exc))


async def _shutdown(
    args: argparse.Namespace,
    plugin: Plugin,
    servers: Servers,
    loops: Supervisor,
) -> None:
    log.info(2, "shutting down")
    # Claim status writes still pending get a moment to land; a restart does not redo them.
    with contextlib.suppress(TimeoutError):
        await within(plugin.status.idle(), STATUS_FLUSH)
    if plugin.status.state.pending:
        log.warning("claim device status left unwritten at shutdown",
                    claims=len(plugin.status.state.pending))  # fmt: skip
    plugin.device_health.stop()
    await loops.stop()
    # Registration socket first, so the kubelet stops using us before the endpoint goes.
    for server in (servers.registration, servers.dra, servers.view):
        if server is not None:
            await server.stop(grace=2)
    paths = plugin.paths
    for socket in (paths.registration_socket, paths.dra_socket, Path(args.socket)):
        with contextlib.suppress(OSError):
            socket.unlink()
    await plugin.allocator.close()
    await plugin.api.aclose()


async def serve(args: argparse.Namespace) -> int:
    plugin = _build(args)
    # Before registering with the kubelet and publishing: one dra-plugin per node.
    await InstanceLock.hold(args.socket, "dra-plugin")
    loops = Supervisor("dra-plugin", registry=plugin.metrics.registry)
    servers = await _start_servers(args, plugin, loops)
    stop = stop_event()
    _start_loops(args, plugin, servers, loops)
    await _register(plugin, servers, stop)
    await stop.wait()
    await _shutdown(args, plugin, servers, loops)
    return 0
