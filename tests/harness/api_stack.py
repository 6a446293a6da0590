"""The api's test beds, as processes: the four services on temporary unix sockets (the real
topology service and stand-ins serving harness.api_scenario, or all of them real), `dracpu-api`
itself on a loopback port, and the whole pod as `dracpu dev up` runs it.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TypeVar

import httpx
import pytest

from dracpu.api.app import create_app
from dracpu.api.backends import Backends
from dracpu.core.rpc import channel
from dracpu.pb.allocator.v1 import allocator_pb2_grpc
from dracpu.topology.fixtures import write_fixture
from harness.api_scenario import FIXTURE, scenario
from harness.paths import short_tmp
from harness.requests import prepare_request
from harness.services import wait_serving

SERVICES = ("topology", "allocator", "dra-plugin", "nri-plugin")
STANDINS = Path(__file__).resolve().parents[1] / "api" / "standin_services.py"
START_DEADLINE = 30.0


# ---- the services ----------------------------------------------------------------------------


def _stop(process: subprocess.Popen[bytes], timeout: float) -> None:
    """SIGTERM, then SIGKILL after `timeout` seconds."""
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


class ServiceSet:
    """The four services as child processes; stop and start any one of them."""

    def __init__(self, workdir: Path, fixture: str = FIXTURE) -> None:
        self.workdir = workdir
        self.sysfs = write_fixture(fixture, workdir / "sys")
        self.scenario_path = workdir / "scenario.json"
        self.scenario_path.write_text(json.dumps(scenario()), encoding="utf-8")
        self.sockets = {name: str(workdir / f"{name}.sock") for name in SERVICES}
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    def command(self, service: str) -> list[str]:
        socket = self.sockets[service]
        if service == "topology":
            return [
                sys.executable,
                "-m",
                "dracpu.topology.main",
                "--socket",
                socket,
                "--sysfs-root",
                str(self.sysfs),
            ]
        return [sys.executable, str(STANDINS), service, socket, str(self.scenario_path)]

    def start(self, service: str) -> None:
        log = open(self.log_path(service), "ab")  # noqa: SIM115 - owned by the child
        self.processes[service] = subprocess.Popen(
            self.command(service), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        log.close()

    def wait_serving(self, service: str) -> None:
        """Wait until `service` is SERVING; fail at once, with its log, if it exits first."""
        asyncio.run(
            wait_serving(
                self.sockets[service],
                self.processes[service],
                what=service,
                log=self.log_path(service),
                timeout=START_DEADLINE,
            )
        )

    def start_all(self) -> None:
        for service in SERVICES:
            self.start(service)
        for service in SERVICES:
            self.wait_serving(service)

    def stop(self, service: str) -> None:
        process = self.processes.pop(service, None)
        if process is not None:
            _stop(process, timeout=10)
        # A SIGKILLed service leaves its socket; nothing answers on it either way.

    def stop_all(self) -> None:
        for service in list(self.processes):
            self.stop(service)

    def log_path(self, service: str) -> Path:
        return self.workdir / f"{service}.log"


class PodServices(ServiceSet):
    """The real services (and the API-server fake, the kubelet and runtime simulators they talk
    to), started one by one from the dev runner's command lines, without its supervisor: a
    stopped one stays down."""

    ORDER = (
        "apiserver", "topology", "allocator", "runtime-sim", "nri-plugin", "dra-plugin",
        "kubelet-sim",
    )  # fmt: skip

    def __init__(self, workdir: Path, fixture: str = FIXTURE) -> None:
        from dracpu.dev.layout import RunLayout
        from dracpu.dev.services import DevOptions, executable, service_commands

        self.workdir = workdir
        self.layout = RunLayout.at(workdir / "run")
        for directory in self.layout.directories():
            directory.mkdir(parents=True, exist_ok=True)
        self.sysfs = write_fixture(fixture, workdir / "sys")
        commands = service_commands(self.layout, DevOptions(sysfs_root=self.sysfs))
        self.commands = {name: executable(commands[name]) for name in self.ORDER}
        self.sockets = {name: str(self.layout.socket(name)) for name in SERVICES}
        self.sockets["runtime-sim"] = str(self.layout.runtime_sim_socket)
        self.sockets["kubelet-sim"] = str(self.layout.kubelet_sim_socket)
        self.processes = {}

    def command(self, service: str) -> list[str]:
        return self.commands[service]

    def wait_serving(self, service: str) -> None:
        if service != "apiserver":
            return super().wait_serving(service)
        from dracpu.dev.readiness import is_ready
        from dracpu.dev.services import readiness

        ready = readiness(service, self.layout, "")
        asyncio.run(
            wait_serving(
                self.layout.apiserver_kubeconfig,
                self.processes[service],
                what=service,
                log=self.log_path(service),
                timeout=START_DEADLINE,
                probe=lambda: is_ready(ready),
            )
        )
        return None

    def start_all(self) -> None:
        for service in self.ORDER:
            self.start(service)
            self.wait_serving(service)

    def prepare(self, uid: str, name: str, cpus: int) -> None:
        """Prepare a claim on NUMA node 0 through the allocator, as the dra-plugin does."""

        async def prepare() -> None:
            async with channel(self.sockets["allocator"]) as chan:
                await allocator_pb2_grpc.AllocatorStub(chan).Prepare(
                    prepare_request(uid, cpus, namespace="team-a", name=name, pool="node-a"),
                    timeout=10,
                )

        asyncio.run(prepare())


_Started = TypeVar("_Started", PodServices, ServiceSet)


@contextmanager
def _running(kind: type[_Started], prefix: str) -> Iterator[_Started]:
    """`kind` started in a new short directory, stopped and removed on leaving."""
    with short_tmp(prefix) as workdir:
        started = kind(workdir)
        try:
            started.start_all()
            yield started
        finally:
            started.stop_all()


def running_pod() -> AbstractContextManager[PodServices]:
    """PodServices started in a new short directory, stopped and removed on leaving."""
    return _running(PodServices, "api-pod-")


def running_services() -> AbstractContextManager[ServiceSet]:
    """A ServiceSet started in a new short directory, stopped and removed on leaving."""
    return _running(ServiceSet, "api-")


def app_client(services: ServiceSet) -> httpx.AsyncClient:
    """An HTTP client of the api application in this process, on `services`' sockets."""
    backends = Backends.from_sockets(services.sockets, timeout=1.0)
    transport = httpx.ASGITransport(app=create_app(backends))
    return httpx.AsyncClient(transport=transport, base_url="http://api")


# ---- the api as a process --------------------------------------------------------------------

# klog text: `I... api.py:NN] "listening" logger="api.x" address="http://..."`.
_LISTENING = re.compile(r'\] "listening" .*address="(http://[^"]+)"')


class ApiProcess:
    def __init__(self, process: subprocess.Popen[bytes], log: Path, url: str) -> None:
        self.process = process
        self.log = log
        self.url = url


def start_api(services: ServiceSet, *extra: str) -> ApiProcess:
    """`dracpu-api` on an ephemeral loopback port; its URL read from its 'listening' line."""
    log_path = services.workdir / "api.log"
    command = [
        sys.executable,
        "-m",
        "dracpu.api.main",
        "--bind-address",
        "127.0.0.1:0",
        *(
            arg
            for service in SERVICES
            for arg in (f"--{service}-socket", services.sockets[service])
        ),
        *extra,
    ]
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "NODE_NAME": "node-a"},
        )

    def listening() -> re.Match[str] | None:
        return _LISTENING.search(log_path.read_text(errors="replace"))

    try:
        asyncio.run(
            wait_serving(
                "127.0.0.1:0",
                process,
                what="dracpu-api",
                log=log_path,
                timeout=START_DEADLINE,
                status="listening",
                probe=listening,
            )
        )
    except BaseException:
        process.kill()
        process.wait()
        raise
    match = listening()
    assert match is not None
    return ApiProcess(process, log_path, match.group(1))


def stop_api(api: ApiProcess) -> None:
    _stop(api.process, timeout=10)


# ---- the whole pod, for real: `dracpu dev up` -------------------------------------------------

_READY = re.compile(r"ready: api (http://\S+)")
_CLAIMED = re.compile(r"claim=(\S+)/(\S+) uid=(\S+) cpuset=(\S+) devices=(\S+) container=(\S+)")
DEV_UP_DEADLINE = 120.0


class Stack:
    """All five real services, the kubelet and runtime simulators, on one run folder."""

    def __init__(self, run_dir: Path, process: subprocess.Popen[bytes], url: str) -> None:
        self.run_dir = run_dir
        self.process = process
        self.url = url
        self.claims: dict[str, dict[str, str]] = {}  # name -> uid, namespace, cpuset, ...

    def claim(self, name: str, namespace: str, cpus: int, numa: int | None = None) -> None:
        """Schedule, prepare and start a container for a claim, as `dracpu dev claim` does."""
        command = [sys.executable, "-m", "dracpu.core.cli", "dev", "claim"]
        command += ["--run-dir", str(self.run_dir), "--cpus", str(cpus)]
        command += ["--name", name, "--namespace", namespace]
        command += ["--numa", str(numa)] if numa is not None else []
        result = subprocess.run(command, capture_output=True, text=True, timeout=60)
        match = _CLAIMED.search(result.stdout)
        assert result.returncode == 0 and match, result.stdout + result.stderr
        ns, claim, uid, cpuset, device, container = match.groups()
        self.claims[name] = {
            "namespace": ns,
            "name": claim,
            "uid": uid,
            "cpus": cpuset,
            "device": device,
            "container": container,
        }


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def running_stack() -> Iterator[Stack]:
    """`dracpu dev up` on xeon-2s-ht in a new run folder, until its 'ready' line; stopped and
    removed on leaving."""
    run_dir = Path(tempfile.mkdtemp(prefix="api-dev-", dir="/tmp"))
    log_path = run_dir.parent / f"{run_dir.name}.log"
    address = f"127.0.0.1:{_free_port()}"
    command = [sys.executable, "-m", "dracpu.core.cli", "dev", "up", "--run-dir", str(run_dir)]
    command += ["--fixture", FIXTURE, "--api-address", address]
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)

    def ready() -> re.Match[str] | None:
        return _READY.search(log_path.read_text(errors="replace"))

    try:
        asyncio.run(
            wait_serving(
                address,
                process,
                what="dracpu dev up",
                log=log_path,
                timeout=DEV_UP_DEADLINE,
                status="ready",
                probe=ready,
                interval=0.1,
            )
        )
        match = ready()
        assert match is not None
        yield Stack(run_dir, process, match.group(1))
    finally:
        _stop(process, timeout=30)
        shutil.rmtree(run_dir, ignore_errors=True)
        log_path.unlink(missing_ok=True)


@pytest.fixture(scope="session")
def stack() -> Iterator[Stack]:
    """`dracpu dev up` on xeon-2s-ht with three claims: two on NUMA node 1, one on node 0.
    Shared by the session's api tests; they only read."""
    with running_stack() as started:
        started.claim("db", "team-a", 4)
        started.claim("batch", "team-b", 2, numa=1)
        started.claim("cache", "team-a", 1, numa=1)
        yield started
