"""The api's test bed: the four services as processes on temporary unix sockets.

topology is the real `dracpu-topology` on a sysfs fixture; allocator, dra-plugin and nri-plugin
are stand-in processes (standin_services.py) serving a scenario through the real protos.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from google.protobuf import json_format

from dracpu.api.app import create_app
from dracpu.api.backends import Backends
from dracpu.core.cpuset import CPUSet
from dracpu.core.errors import DracpuError
from dracpu.core.rpc import channel, check_health
from dracpu.pb.allocator.v1 import allocator_pb2, allocator_pb2_grpc
from dracpu.pb.dra_plugin.v1 import dra_plugin_pb2
from dracpu.pb.nri_plugin.v1 import nri_plugin_pb2
from dracpu.topology.fixtures import write_fixture

HERE = Path(__file__).parent
SERVICES = ("topology", "allocator", "dra-plugin", "nri-plugin")
START_DEADLINE = 30.0

# ---- the scenario: xeon-2s-ht (socket 0 = CPUs 0-9,20-29, socket 1 = 10-19,30-39) -----------

FIXTURE = "xeon-2s-ht"
RESERVED = "0,20"
UID_DB = "0a1b2c3d-0000-4000-8000-000000000001"
UID_BATCH = "0a1b2c3d-0000-4000-8000-000000000002"
UID_CACHE = "0a1b2c3d-0000-4000-8000-000000000003"
PREPARED_AT_NS = 1_780_000_000_123_000_000  # 2026-05-28T20:26:40.123Z
CLAIMS = (
    # uid, namespace, name, device, cpus, owner (pod, container, running) or None
    (UID_DB, "team-a", "db", "cpudevnuma000", "2-3,22-23", ("db-0", "postgres", True)),
    (UID_BATCH, "team-b", "batch", "cpudevnuma001", "12-15,32-35", None),
    (UID_CACHE, "team-a", "cache", "cpudevnuma001", "30", ("cache-0", "redis", False)),
)
# The claims whose memory is placed: their NUMA nodes (cpuset.mems); the others have none.
MEMORY_NODES = {UID_DB: "0"}
EXCLUSIVE = "2-3,12-15,22-23,30,32-35"
ONLINE = "0-39"
SHARED = (CPUSet.parse(ONLINE) - CPUSet.parse(RESERVED) - CPUSet.parse(EXCLUSIVE)).format()


def _claim(uid: str, ns: str, name: str, device: str, cpus: str, owner: object) -> object:
    claim = allocator_pb2.Claim(
        uid=uid,
        namespace=ns,
        name=name,
        cpus=cpus,
        allocations=[
            allocator_pb2.ClaimAllocation(request="cpus", pool="node-a", device=device, cpus=cpus)
        ],
        prepared_at_unix_nano=PREPARED_AT_NS,
        policy="packed",
        cdi_device_id=f"dra.k8s.io/cpu=claim-{uid}",
        memory_nodes=MEMORY_NODES.get(uid, ""),
    )
    if owner is not None:
        pod, container, running = owner  # type: ignore[misc]
        claim.owner.CopyFrom(
            allocator_pb2.ContainerRef(
                container_id=f"ctr-{container}",
                pod_uid=f"pod-{pod}",
                pod_namespace=ns,
                pod_name=pod,
                container_name=container,
            )
        )
        claim.owner_running = running
    return claim


def _device(name: str, node: int, cpus: str, allocatable: int) -> object:
    attrs = {
        "dra.cpu/numaNodeID": allocator_pb2.AttributeValue(int=node),
        "dra.cpu/socketID": allocator_pb2.AttributeValue(int=node),
        "dra.cpu/smtEnabled": allocator_pb2.AttributeValue(bool=True),
        "dra.cpu/coreType": allocator_pb2.AttributeValue(string="standard"),
        "resource.kubernetes.io/pcieRoot": allocator_pb2.AttributeValue(
            strings=allocator_pb2.StringList(values=[f"pci0000:{0x80 * node:02x}"])
        ),
    }
    return allocator_pb2.Device(
        name=name,
        attributes=attrs,
        capacity={"dra.cpu/cpu": str(allocatable)},
        allow_multiple_allocations=True,
        cpus=cpus,
    )


def scenario() -> dict[str, object]:
    def js(message: object) -> object:
        return json_format.MessageToDict(message, preserving_proto_field_name=True)  # type: ignore[arg-type]

    devices = allocator_pb2.DeviceList(
        generation=7,
        driver="dra.cpu",
        mode="grouped",
        group_by="numanode",
        devices=[
            _device("cpudevnuma000", 0, "1-9,21-29", 18),
            _device("cpudevnuma001", 1, "10-19,30-39", 20),
        ],
        uses_list_attributes=True,
    )
    pool = allocator_pb2.SharedPool(
        cpus=SHARED, reserved=RESERVED, online=ONLINE, exclusive=EXCLUSIVE, generation=4
    )
    containers = [
        nri_plugin_pb2.ContainerView(
            container_id="ctr-postgres",
            pod_uid="pod-db-0",
            pod_namespace="team-a",
            pod_name="db-0",
            container_name="postgres",
            claim_uids=[UID_DB],
            cpus="2-3,22-23",
            exclusive=True,
            state="running",
        ),
        nri_plugin_pb2.ContainerView(
            container_id="ctr-web",
            pod_uid="pod-web-0",
            pod_namespace="team-c",
            pod_name="web-0",
            container_name="nginx",
            cpus=SHARED,
            exclusive=False,
            state="running",
        ),
    ]
    return {
        "allocator": {
            "devices": js(devices),
            "claims": [js(_claim(*entry)) for entry in CLAIMS],
            "shared_pool": js(pool),
        },
        "dra-plugin": {
            "status": js(
                dra_plugin_pb2.PluginStatus(
                    node_name="node-a",
                    registered=True,
                    registration_socket="/var/lib/kubelet/plugins_registry/dra.cpu/dra.cpu-reg.sock",
                    dra_socket="/var/lib/kubelet/plugins/dra.cpu/dra.sock",
                    published_generation=7,
                    slice_count=1,
                    last_published_at_unix=1_780_000_100,
                    claim_source="cluster-dir:/tmp/cluster",
                    slice_sync="resync",
                    missing_api_features=[
                        dra_plugin_pb2.MissingApiFeature(
                            name="listTypeAttributes",
                            feature_gate="DRAListTypeAttributes",
                            reason="spec.devices[0].attributes: Forbidden: list-type attributes",
                            detected_at_unix=1_780_000_050,
                        )
                    ],
                )
            )
        },
        "nri-plugin": {
            "containers": [js(c) for c in containers],
            "status": js(
                nri_plugin_pb2.PluginStatus(
                    connected=True,
                    runtime_name="containerd",
                    runtime_version="2.2.1",
                    socket="/var/run/nri/nri.sock",
                    synchronized_at_unix=1_780_000_050,
                )
            ),
        },
    }


# ---- processes -------------------------------------------------------------------------------


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
        return [
            sys.executable,
            str(HERE / "standin_services.py"),
            service,
            socket,
            str(self.scenario_path),
        ]

    def start(self, service: str) -> None:
        log = open(self.workdir / f"{service}.log", "ab")  # noqa: SIM115 - owned by the child
        self.processes[service] = subprocess.Popen(
            self.command(service), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        log.close()

    def wait_serving(self, service: str) -> None:
        deadline = time.monotonic() + START_DEADLINE
        process = self.processes[service]
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise AssertionError(f"{service} exited {process.returncode}: {self.log(service)}")
            try:
                if asyncio.run(check_health(self.sockets[service], timeout=0.5)) == "SERVING":
                    return
            except DracpuError:
                pass
            time.sleep(0.05)  # polling interval, not synchronisation
        raise AssertionError(f"{service} not SERVING within {START_DEADLINE}s: {self.log(service)}")

    def start_all(self) -> None:
        for service in SERVICES:
            self.start(service)
        for service in SERVICES:
            self.wait_serving(service)

    def stop(self, service: str) -> None:
        process = self.processes.pop(service, None)
        if process is None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        # A SIGKILLed service leaves its socket; nothing answers on it either way.

    def stop_all(self) -> None:
        for service in list(self.processes):
            self.stop(service)

    def log(self, service: str) -> str:
        path = self.workdir / f"{service}.log"
        return path.read_text(errors="replace")[-2000:] if path.exists() else ""


class PodServices(ServiceSet):
    """The real services (and the kubelet and runtime simulators they talk to), started one by
    one from the dev runner's command lines, without its supervisor: a stopped one stays down."""

    ORDER = ("topology", "allocator", "runtime-sim", "nri-plugin", "dra-plugin", "kubelet-sim")

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

    def start_all(self) -> None:
        for service in self.ORDER:
            self.start(service)
            self.wait_serving(service)

    def prepare(self, uid: str, name: str, cpus: int) -> None:
        """Prepare a claim on NUMA node 0 through the allocator, as the dra-plugin does."""

        async def prepare() -> None:
            async with channel(self.sockets["allocator"]) as chan:
                await allocator_pb2_grpc.AllocatorStub(chan).Prepare(
                    allocator_pb2.PrepareRequest(
                        claim_uid=uid,
                        namespace="team-a",
                        name=name,
                        results=[
                            allocator_pb2.AllocationResult(
                                request="cpus",
                                driver="dra.cpu",
                                pool="node-a",
                                device="cpudevnuma000",
                                consumed_capacity={"dra.cpu/cpu": str(cpus)},
                            )
                        ],
                    ),
                    timeout=10,
                )

        asyncio.run(prepare())


@contextmanager
def running_pod() -> Iterator[PodServices]:
    workdir = Path(tempfile.mkdtemp(prefix="api-pod-", dir="/tmp"))
    started = PodServices(workdir)
    try:
        started.start_all()
        yield started
    finally:
        started.stop_all()
        shutil.rmtree(workdir, ignore_errors=True)


@contextmanager
def running_services() -> Iterator[ServiceSet]:
    # Short paths: unix socket names are limited to 107 bytes.
    workdir = Path(tempfile.mkdtemp(prefix="api-", dir="/tmp"))
    started = ServiceSet(workdir)
    try:
        started.start_all()
        yield started
    finally:
        started.stop_all()
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="module")
def services() -> Iterator[ServiceSet]:
    """Shared by a module's tests; they only read."""
    with running_services() as started:
        yield started


@pytest.fixture
def own_pod() -> Iterator[PodServices]:
    """The real services, for a test that stops them."""
    with running_pod() as started:
        started.prepare(UID_DB, "db", 4)
        yield started


def app_client(services: ServiceSet) -> httpx.AsyncClient:
    backends = Backends.from_sockets(services.sockets, timeout=1.0)
    transport = httpx.ASGITransport(app=create_app(backends))
    return httpx.AsyncClient(transport=transport, base_url="http://api")


@pytest.fixture
async def client(services: ServiceSet) -> AsyncIterator[httpx.AsyncClient]:
    async with app_client(services) as http:
        yield http


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
    deadline = time.monotonic() + START_DEADLINE
    while time.monotonic() < deadline:
        match = _LISTENING.search(log_path.read_text(errors="replace"))
        if match:
            return ApiProcess(process, log_path, match.group(1))
        if process.poll() is not None:
            break
        time.sleep(0.05)  # polling interval, not synchronisation
    process.kill()
    raise AssertionError(f"dracpu-api did not start: {log_path.read_text(errors='replace')}")


def stop_api(api: ApiProcess) -> None:
    api.process.send_signal(signal.SIGTERM)
    try:
        api.process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        api.process.kill()
        api.process.wait()


@pytest.fixture
def api_process(services: ServiceSet) -> Iterator[ApiProcess]:
    api = start_api(services)
    try:
        yield api
    finally:
        stop_api(api)


# ---- the whole pod, for real: `dracpu dev up` -------------------------------------------------

_READY = re.compile(r"ready: api (http://\S+)")
_CLAIMED = re.compile(r"claim=(\S+)/(\S+) uid=(\S+) cpuset=(\S+) devices=(\S+) container=(\S+)")


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
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="session")
def stack() -> Iterator[Stack]:
    """`dracpu dev up` on xeon-2s-ht with three claims: two on NUMA node 1, one on node 0."""
    run_dir = Path(tempfile.mkdtemp(prefix="api-dev-", dir="/tmp"))
    log_path = run_dir.parent / f"{run_dir.name}.log"
    command = [sys.executable, "-m", "dracpu.core.cli", "dev", "up", "--run-dir", str(run_dir)]
    command += ["--fixture", FIXTURE, "--api-address", f"127.0.0.1:{_free_port()}"]
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        url = None
        while url is None:
            match = _READY.search(log_path.read_text(errors="replace"))
            url = match.group(1) if match else None
            if url is None and (process.poll() is not None or time.monotonic() > deadline):
                raise AssertionError(f"dracpu dev up: {log_path.read_text(errors='replace')}")
            time.sleep(0.1)  # polling interval, not synchronisation
        started = Stack(run_dir, process, url)
        started.claim("db", "team-a", 4)
        started.claim("batch", "team-b", 2, numa=1)
        started.claim("cache", "team-a", 1, numa=1)
        yield started
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(run_dir, ignore_errors=True)
        log_path.unlink(missing_ok=True)
