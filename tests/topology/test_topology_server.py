"""The topology service as a real process on a temporary unix socket."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from harness import paths
from harness.services import wait_serving
from logformats import klog_lines

from dracpu.core import __version__
from dracpu.core.config import load
from dracpu.core.rpc import channel
from dracpu.pb.common.v1 import info_pb2, info_pb2_grpc
from dracpu.pb.topology.v1 import topology_pb2, topology_pb2_grpc
from dracpu.topology import gatherinfo
from dracpu.topology.discovery import discover
from dracpu.topology.fixtures import write_fixture

DEADLINE = 20.0


@dataclass
class Running:
    process: subprocess.Popen[bytes]
    socket: Path
    root: Path
    log: Path

    def log_text(self) -> str:
        return self.log.read_text()


@pytest.fixture
def workdir() -> Iterator[Path]:
    # Short paths: a unix socket path must fit in 107 bytes.
    with paths.short_tmp("topo") as path:
        yield path


def start(
    workdir: Path,
    *args: str,
    program: tuple[str, ...] = (sys.executable, "-m", "dracpu.topology.main"),
) -> tuple[subprocess.Popen[bytes], Path]:
    log = workdir / "topology.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [*program, *args],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    return process, log


async def health(socket: Path, service: str = "") -> str:
    async with channel(socket) as chan:
        reply = await health_pb2_grpc.HealthStub(chan).Check(
            health_pb2.HealthCheckRequest(service=service), timeout=2
        )
        return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))


def stop(process: subprocess.Popen[bytes]) -> int:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        return process.wait(timeout=DEADLINE)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise


@pytest.fixture
async def service(workdir: Path) -> AsyncIterator[Running]:
    root = write_fixture("xeon-2s-ht", workdir / "sys")
    socket = workdir / "t.sock"
    process, log = start(workdir, "--socket", str(socket), "--sysfs-root", str(root), "-v", "2")
    running = Running(process, socket, root, log)
    try:
        await wait_serving(
            running.socket, process, what="the topology service", log=log, timeout=DEADLINE
        )
        yield running
    finally:
        stop(process)


async def inventory(socket: Path) -> topology_pb2.Inventory:
    async with channel(socket) as chan:
        stub = topology_pb2_grpc.TopologyStub(chan)
        return await stub.GetInventory(topology_pb2.GetInventoryRequest(), timeout=5)


async def rediscover(socket: Path) -> topology_pb2.Inventory:
    async with channel(socket) as chan:
        stub = topology_pb2_grpc.TopologyStub(chan)
        return await stub.Rediscover(topology_pb2.RediscoverRequest(), timeout=5)


def without_timestamp(message: topology_pb2.Inventory) -> topology_pb2.Inventory:
    copy = topology_pb2.Inventory()
    copy.CopyFrom(message)
    copy.ClearField("discovered_at_unix")
    return copy


async def test_serves_the_discovered_inventory(service: Running) -> None:
    reply = await inventory(service.socket)
    assert without_timestamp(reply) == discover(service.root).to_proto()
    assert len(reply.cpus) == 40
    assert abs(reply.discovered_at_unix - time.time()) < 120
    assert await health(service.socket, "dracpu.topology.v1.Topology") == "SERVING"


async def test_reports_its_version(service: Running) -> None:
    async with channel(service.socket) as chan:
        version = await info_pb2_grpc.InfoStub(chan).GetVersion(
            info_pb2.GetVersionRequest(), timeout=5
        )
    assert version.service == "topology"
    assert version.version == __version__
    assert version.api_version == "dracpu.topology.v1"
    assert version.pid == service.process.pid


async def test_rediscover_sees_a_cpu_going_offline(service: Running) -> None:
    before = await inventory(service.socket)
    cpu_dir = service.root / "devices/system/cpu"
    (cpu_dir / "online").write_text("0-2,4-39\n")
    shutil.rmtree(cpu_dir / "cpu3/topology")
    shutil.rmtree(cpu_dir / "cpu3/cache")
    after = await rediscover(service.socket)
    assert after.online == "0-2,4-39"
    assert [c.cpu_id for c in after.cpus] == [c for c in range(40) if c != 3]
    assert after.fingerprint != before.fingerprint
    assert await inventory(service.socket) == after
    assert "inventory changed" in service.log_text()


async def test_failed_rediscover_keeps_the_last_inventory(service: Running) -> None:
    before = await inventory(service.socket)
    (service.root / "devices").rename(service.root / "moved")
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await rediscover(service.socket)
    assert failure.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "devices/system/cpu is missing" in (failure.value.details() or "")
    assert await inventory(service.socket) == before
    assert await health(service.socket) == "SERVING"


async def test_sigterm_stops_cleanly_and_removes_the_socket(service: Running) -> None:
    assert stop(service.process) == 0
    assert not service.socket.exists()
    log = service.log_text()
    lines = {line.msg: line for line in klog_lines(log)}
    assert lines["effective configuration"].values["sysfsRoot"] == str(service.root)
    assert "stopping" in lines
    assert "Traceback" not in log


BAD_START: dict[str, tuple[list[str], str]] = {
    "nonexistent sysfs root": (["--sysfs-root", "/nonexistent/sys"], "does not exist"),
    "unknown flag": (["--bogus"], "unrecognized arguments: --bogus"),
    "socket path too long": (["--socket", "/tmp/" + "s" * 120 + ".sock"], "the limit is 107"),
    "bad config": (["--config", "/nonexistent.yaml"], "config file /nonexistent.yaml"),
}


@pytest.mark.parametrize("args, fragment", list(BAD_START.values()), ids=list(BAD_START))
def test_bad_start_is_one_line_exit_2(args: list[str], fragment: str, workdir: Path) -> None:
    argv = ["--socket", str(workdir / "t.sock"), *args]
    process, log = start(workdir, *argv)
    assert process.wait(timeout=DEADLINE) == 2
    lines = log.read_text().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("dracpu-topology: error: ")
    assert fragment in lines[0]
    assert not os.path.exists(workdir / "t.sock")


async def test_the_service_applies_a_sysfs_overlay_and_gatherinfo_reads_its_command_line(
    workdir: Path,
) -> None:
    # The real console script, as the image runs it (PID 1 of the topology container), with
    # the reference's kind of overlay: CPU 1 moved to a NUMA node 1 of its own.
    root = write_fixture("single-4c8t", workdir / "sys")
    overlay = workdir / "overlay.yaml"
    overlay.write_text(
        '/sys/devices/system/node/node1/cpulist: "1\\n"\n'
        '/sys/devices/system/node/node0/cpulist: "0,2-7\\n"\n'
        '/sys/devices/system/cpu/cpu1/node1: ""\n'
    )
    config = workdir / "config.yaml"
    config.write_text(f"sysfsOverlay: {overlay}\ngroupBy: socket\n")
    socket = workdir / "t.sock"
    script = str(Path(sys.executable).with_name("dracpu-topology"))
    process, log = start(
        workdir,
        "--socket",
        str(socket),
        "--sysfs-root",
        str(root),
        f"--config={config}",
        program=(script,),
    )
    running = Running(process, socket, root, log)
    try:
        await wait_serving(
            running.socket, process, what="the topology service", log=log, timeout=DEADLINE
        )
        served = await inventory(socket)
        assert {cpu.cpu_id: cpu.numa_node_id for cpu in served.cpus}[1] == 1
        assert {cpu.numa_node_id for cpu in served.cpus} == {0, 1}
        applied = [x for x in klog_lines(running.log_text()) if x.msg == "sysfs overlay applied"]
        assert applied and applied[0].values["paths"] == 3

        argv = gatherinfo.driver_command_line(Path("/proc"), process.pid)
        assert argv == ["--socket", str(socket), "--sysfs-root", str(root), f"--config={config}"]
        running_config = load(gatherinfo._driver_namespace(argv))
        assert (running_config.sysfs_overlay, running_config.group_by) == (str(overlay), "socket")
        assert running_config.effective_sysfs_root() == root
    finally:
        stop(process)
