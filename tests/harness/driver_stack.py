"""One simulated node's driver against the real API server: topology, allocator and dra-plugin
as processes on a sysfs fixture, the plugin with a kubeconfig, and the kubelet stand-in for
NodePrepareResources.

The control-plane tier's fixtures of it (tests/controlplane/conftest.py exposes them): `stack`,
a driver a test starts itself, and `running_stack`, one started for a module's tests. Both run
the module's NODE with its STACK_CONFIG (when it has one) on the credentials of
`driver_kubeconfig`: the control plane's admin kubeconfig unless the module overrides that
fixture (with a ServiceAccount's token, say)."""

from __future__ import annotations

import asyncio
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from dracpu.core import rpc
from dracpu.dev.kubelet_sim import KubeletSim, RegisteredPlugin
from dracpu.pb.common.v1 import info_pb2, info_pb2_grpc
from dracpu.pb.dra_plugin.v1 import dra_plugin_pb2, dra_plugin_pb2_grpc
from dracpu.topology.fixtures import write_fixture
from harness.control_plane import ControlPlane
from harness.services import wait_serving
from harness.waits import eventually

BIN = Path(sys.executable).parent
DRIVER = "dra.cpu"


class DriverStack:
    def __init__(
        self,
        node: str,
        kubeconfig: Path,
        *,
        fixture: str = "xeon-2s-ht",
        sysfs: Path | None = None,
        config: dict[str, Any] | None = None,
    ) -> None:
        self.node = node
        self.kubeconfig = kubeconfig
        self.root = Path(tempfile.mkdtemp(prefix="cp", dir="/tmp"))
        self.sysfs = sysfs or write_fixture(fixture, self.root / "sys")
        self.kubelet_root = self.root / "k"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.configure(**(config or {}))

    def configure(self, **fields: Any) -> None:
        # No shared-pool floor unless a test asks: these tests count every CPU's device.
        document = {
            "apiVersion": "v1alpha1",
            "hostnameOverride": self.node,
            "minSharedCPUs": 0,
            **fields,
        }
        (self.root / "config.yaml").write_text(yaml.safe_dump(document))

    def sock(self, name: str) -> Path:
        return self.root / f"{name}.sock"

    def log(self, name: str) -> Path:
        return self.root / f"{name}.log"

    def _spawn(self, name: str, argv: list[str]) -> None:
        with self.log(name).open("ab") as out:
            self.procs[name] = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    async def _ready(self, name: str) -> None:
        # The socket file exists from bind; until the server listens a connect is refused.
        await wait_serving(
            self.sock(name), self.procs[name], what=name, log=self.log(name), timeout=60,
            interval=0.1,
        )  # fmt: skip

    async def start(self, *allocator_flags: str, plugin_flags: tuple[str, ...] = ()) -> None:
        common = ["--config", str(self.root / "config.yaml")]
        self._spawn(
            "topology",
            # A fixture's sysfs sends no uevents: re-read it every 2 s, so a test's hotplug
            # reaches the slices as the kernel's uevent would make it.
            [str(BIN / "dracpu-topology"), "--socket", str(self.sock("topology")),
             "--sysfs-root", str(self.sysfs), "--watch-interval", "2"],
        )  # fmt: skip
        await self._ready("topology")
        self._spawn(
            "allocator",
            [str(BIN / "dracpu-allocator"), "--socket", str(self.sock("allocator")),
             "--topology-socket", str(self.sock("topology")), "--state-dir",
             str(self.root / "state"), "--cdi-dir", str(self.root / "cdi"), *common,
             *allocator_flags],
        )  # fmt: skip
        await self._ready("allocator")
        self.start_plugin(*plugin_flags)
        await self._ready("dra-plugin")

    def start_plugin(self, *flags: str, kubeconfig: Path | None = None) -> None:
        self._spawn(
            "dra-plugin",
            [str(BIN / "dracpu-dra-plugin"), "--socket", str(self.sock("dra-plugin")),
             "--allocator-socket", str(self.sock("allocator")),
             "--kubelet-root-dir", str(self.kubelet_root), "--cdi-dir", str(self.root / "cdi"),
             "--kubeconfig", str(kubeconfig or self.kubeconfig), "--poll-interval", "0.5",
             "--config", str(self.root / "config.yaml"), "-v", "4", *flags],
        )  # fmt: skip

    async def restart_plugin(self, *flags: str, kubeconfig: Path | None = None) -> None:
        self.stop("dra-plugin")
        self.start_plugin(*flags, kubeconfig=kubeconfig)
        await self._ready("dra-plugin")

    async def status(self) -> dra_plugin_pb2.PluginStatus:
        async with rpc.channel(self.sock("dra-plugin")) as chan:
            stub = dra_plugin_pb2_grpc.DRAPluginViewStub(chan)
            reply: dra_plugin_pb2.PluginStatus = await stub.GetStatus(
                dra_plugin_pb2.GetStatusRequest(), timeout=10
            )
            return reply

    async def metrics(self) -> str:
        async with rpc.channel(self.sock("dra-plugin")) as chan:
            stub = info_pb2_grpc.InfoStub(chan)
            reply = await stub.GetMetrics(info_pb2.GetMetricsRequest(), timeout=10)
            return str(reply.text)

    async def kubelet(self) -> RegisteredPlugin:
        return await KubeletSim(self.kubelet_root).register(DRIVER, timeout=30)

    def plugin_log(self) -> str:
        return self.log("dra-plugin").read_text(errors="replace")

    def stop(self, name: str) -> None:
        proc = self.procs.pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def close(self) -> None:
        for name in ("dra-plugin", "allocator", "topology"):
            self.stop(name)
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture(scope="module")
def driver_kubeconfig(control_plane: ControlPlane) -> Path:
    """The credentials of the module's driver: the control plane's admin kubeconfig; a module
    overrides this fixture to run its driver as someone else."""
    return control_plane.kubeconfig


def _module_driver(request: pytest.FixtureRequest, kubeconfig: Path) -> DriverStack:
    module = request.module
    return DriverStack(module.NODE, kubeconfig, config=getattr(module, "STACK_CONFIG", None))


@pytest.fixture
def stack(request: pytest.FixtureRequest, driver_kubeconfig: Path) -> Iterator[DriverStack]:
    """The driver of the module's NODE, not started (the test starts it, with the flags it
    needs); closed after the test, so every test has a driver of its own."""
    made = _module_driver(request, driver_kubeconfig)
    yield made
    made.close()


@pytest.fixture(scope="module")
def running_stack(request: pytest.FixtureRequest, driver_kubeconfig: Path) -> Iterator[DriverStack]:
    """The driver of the module's NODE, started once and its slices published, for a module
    whose tests each leave it as they found it (they may restart the plugin)."""
    made = _module_driver(request, driver_kubeconfig)

    async def start() -> None:
        await made.start()

        async def published() -> bool:
            status = await made.status()
            return status.slice_count > 0 and status.last_publish_error == ""

        await eventually(published, "the driver's slices published", timeout=60, interval=0.2)

    try:
        asyncio.run(start())
        yield made
    finally:
        made.close()
