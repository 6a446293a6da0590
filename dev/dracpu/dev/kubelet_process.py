"""The kubelet simulator as a process of a local run: it keeps the dra.cpu plugin registered
(again whenever its registration socket is re-created, as the kubelet's plugin watcher does)
and prepares or unprepares claims when `dev claim` / `dev release` ask over its control socket.

    python -m dracpu.dev.kubelet_process --kubelet-root-dir DIR --control-socket PATH
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TypeVar

import grpc

from dracpu.core.cli import ArgumentParser, run_async
from dracpu.core.driver import DRIVER_NAME
from dracpu.core.errors import ConflictError, InvalidInputError, UnavailableError
from dracpu.core.log import get_logger, setup
from dracpu.core.rpc import Health, rpc_errors, start_server
from dracpu.dev.kubelet_sim import Claim, KubeletSim, PluginRejected, RegisteredPlugin
from dracpu.dev.sim_control import KUBELET_SERVICE, Body, control_handler

log = get_logger(__name__)

WATCH_INTERVAL = 0.2
# How long a DRA call waits for a restarting plugin, as the kubelet retries a pod's prepare; a
# slow node (an emulated test guest) sets more through the environment.
PLUGIN_WAIT = float(os.environ.get("DRACPU_KUBELET_SIM_PLUGIN_WAIT", "10"))

T = TypeVar("T")


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return (stat.st_ino, stat.st_mtime_ns)


def _claim(body: Body) -> Claim:
    try:
        return Claim(namespace=str(body["namespace"]), name=str(body["name"]), uid=str(body["uid"]))
    except KeyError as exc:
        raise InvalidInputError(f"claim reference without {exc.args[0]}") from None


class KubeletProcess:
    def __init__(self, kubelet: KubeletSim, health: Health | None = None) -> None:
        self._kubelet = kubelet
        self._health = health
        self._plugin: RegisteredPlugin | None = None
        self._identity: tuple[int, int] | None = None

    def attach(self, health: Health) -> None:
        self._health = health

    async def keep_registered(self) -> None:
        """Register the plugin, and register it again whenever its socket is replaced."""
        while True:
            if self._plugin is None:
                await self._register()
            await asyncio.sleep(WATCH_INTERVAL)
            if self._plugin is not None:
                current = _identity(self._plugin.registration_socket)
                if current != self._identity:
                    log.info(2, "registration socket changed; registering again")
                    await self._drop()

    async def _register(self) -> None:
        try:
            plugin = await self._kubelet.register(DRIVER_NAME, timeout=WATCH_INTERVAL * 5)
        except (UnavailableError, PluginRejected) as exc:
            log.info(4, "plugin not registered yet", reason=str(exc))
            return
        self._plugin = plugin
        self._identity = _identity(plugin.registration_socket)
        log.info(
            0,
            "plugin registered",
            driver=plugin.name,
            endpoint=plugin.endpoint,
            dra=plugin.dra_version,
            health=plugin.health_version or "none",
        )
        if self._health is not None:
            await self._health.set(True)

    async def _drop(self) -> None:
        plugin, self._plugin = self._plugin, None
        if self._health is not None:
            await self._health.set(False)
        if plugin is not None:
            await plugin.close()

    async def _with_plugin(self, call: Callable[[RegisteredPlugin], Awaitable[T]], what: str) -> T:
        """Run a DRA call on the registered plugin. While the plugin restarts (not registered
        yet, or its socket briefly unreachable) retry until PLUGIN_WAIT is spent, as the
        kubelet retries a pod's prepare; the calls are idempotent per claim."""
        deadline = time.monotonic() + PLUGIN_WAIT
        while True:
            plugin = self._plugin
            if plugin is not None:
                try:
                    return await call(plugin)
                except grpc.aio.AioRpcError as exc:
                    if exc.code() != grpc.StatusCode.UNAVAILABLE or time.monotonic() > deadline:
                        raise UnavailableError(
                            f"{what}: {exc.details() or exc.code().name}"
                        ) from None
            elif time.monotonic() > deadline:
                raise UnavailableError(
                    f"plugin {DRIVER_NAME} is not registered with the kubelet simulator"
                )
            await asyncio.sleep(WATCH_INTERVAL)

    @rpc_errors
    async def Prepare(self, body: Body, context: grpc.aio.ServicerContext) -> Body:
        claim = _claim(body)
        results = await self._with_plugin(
            lambda plugin: plugin.prepare([claim]), "NodePrepareResources"
        )
        result = results[claim.uid]
        if result.error:
            raise ConflictError(
                f"NodePrepareResources of {claim.namespace}/{claim.name}: {result.error}"
            )
        log.info(2, "claim prepared", claim=f"{claim.namespace}/{claim.name}", uid=claim.uid)
        return {
            "devices": [
                {
                    "request_names": device.request_names,
                    "pool_name": device.pool_name,
                    "device_name": device.device_name,
                    "cdi_device_ids": device.cdi_device_ids,
                }
                for device in result.devices
            ]
        }

    @rpc_errors
    async def Unprepare(self, body: Body, context: grpc.aio.ServicerContext) -> Body:
        claim = _claim(body)
        errors = await self._with_plugin(
            lambda plugin: plugin.unprepare([claim]), "NodeUnprepareResources"
        )
        if errors[claim.uid]:
            raise ConflictError(
                f"NodeUnprepareResources of {claim.namespace}/{claim.name}: {errors[claim.uid]}"
            )
        log.info(2, "claim unprepared", claim=f"{claim.namespace}/{claim.name}", uid=claim.uid)
        return {}

    @rpc_errors
    async def GetStatus(self, body: Body, context: grpc.aio.ServicerContext) -> Body:
        plugin = self._plugin
        return {
            "registered": plugin is not None,
            "endpoint": plugin.endpoint if plugin else "",
            "dra_version": plugin.dra_version if plugin else "",
        }


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="python -m dracpu.dev.kubelet_process", description=__doc__)
    parser.add_argument("--kubelet-root-dir", required=True, metavar="DIR")
    parser.add_argument("--control-socket", required=True, metavar="PATH")
    parser.add_argument("-v", "--v", dest="verbosity", type=int, default=0, metavar="N")
    return parser


async def serve(kubelet_root: str, control_socket: str) -> int:
    process = KubeletProcess(KubeletSim(kubelet_root))

    def register(server: grpc.aio.Server) -> None:
        server.add_generic_rpc_handlers(
            (
                control_handler(
                    KUBELET_SERVICE,
                    {
                        "Prepare": process.Prepare,
                        "Unprepare": process.Unprepare,
                        "GetStatus": process.GetStatus,
                    },
                ),
            )
        )

    server, health = await start_server(
        control_socket, register, service="kubelet-sim", api_version="v1"
    )
    process.attach(health)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    watcher = asyncio.create_task(process.keep_registered())
    await stop.wait()
    watcher.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await watcher
    await server.stop(grace=1.0)
    Path(control_socket).unlink(missing_ok=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup(args.verbosity, "kubelet-sim", fmt="logfmt")
    return run_async(lambda: serve(args.kubelet_root_dir, args.control_socket), "kubelet-sim")


if __name__ == "__main__":
    raise SystemExit(main())
