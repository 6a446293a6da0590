"""Memory placement across versions, on one state directory: an earlier release's allocator
starts on the claim records this checkout wrote (one claim placed, one not), serves and
attaches both, and the records it rewrites load here again with the CPUs kept. A release from
before memory placement (its allocator API has no `memory_nodes`, as the release's own
generated messages say) answers with no memory nodes, which this checkout's nri-plugin reads as
"leave mems alone", and its rewrite drops the placement; a release that knows it keeps it.
Records without the field read as not placed."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness.services import wait_serving
from skew_builds import Build

from dracpu.allocator.claims import PrepareInput, ResultInput
from dracpu.allocator.domain.devices import DeviceOptions
from dracpu.allocator.domain.opaque import OpaqueConfig
from dracpu.allocator.live.node import NodeAllocator
from dracpu.allocator.store import records
from dracpu.core.cpuset import CPUSet
from dracpu.core.rpc import call, channel, check_health
from dracpu.pb.allocator.v1 import allocator_pb2, allocator_pb2_grpc
from dracpu.topology.discovery import discover
from dracpu.topology.fixtures import write_fixture

pytestmark = [pytest.mark.skew, pytest.mark.timeout(300)]

RESERVED = "0,20"
POD = "8d7c6b5a-0000-4000-8000-000000000001"
LOCAL = json.dumps({"apiVersion": "v1alpha1", "cpuConfig": {"memoryPlacement": "local"}})


@pytest.fixture
def base() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(dir="/tmp", prefix="skm-"))  # socket paths stay short
    yield path
    shutil.rmtree(path, ignore_errors=True)


def claim(uid: str, device: str, placed: bool) -> PrepareInput:
    configs = (OpaqueConfig("FromClaim", (), "dra.cpu", LOCAL.encode()),) if placed else ()
    result = ResultInput(request="cpus", device=device, pool="n", consumed={"dra.cpu/cpu": "2"})
    return PrepareInput(uid=uid, namespace="ns", name=uid, results=(result,), configs=configs)


def knows_memory_placement(build: Build) -> bool:
    """Whether the build's allocator API carries a claim's memory nodes."""
    probe = (
        "from dracpu.pb.allocator.v1 import allocator_pb2 as a; "
        "print('memory_nodes' in a.AttachContainerResponse.DESCRIPTOR.fields_by_name)"
    )
    done = subprocess.run([str(build.python), "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip() == "True"


def spawn_allocator(build: Build, base: Path, topology: Path, log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as sink:
        return subprocess.Popen(
            [str(build.bin / "dracpu-allocator"), "--socket", str(base / "a.sock"),
             "--topology-file", str(topology), "--state-dir", str(base / "state"),
             "--cdi-dir", str(base / "cdi"), "--reserved-cpus", RESERVED,
             "--topology-refresh", "0"],
            stdout=sink, stderr=subprocess.STDOUT,
        )  # fmt: skip


def stop(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=15)


async def serving(socket: Path, process: subprocess.Popen[bytes], log: Path) -> None:
    async def healthy() -> bool:
        return socket.exists() and await check_health(socket, timeout=1.0) == "SERVING"

    await wait_serving(socket, process, what="the release's allocator", log=log, timeout=30,
                       probe=healthy, interval=0.1)  # fmt: skip


async def test_the_release_allocator_keeps_placed_claims_cpus_and_the_placement_it_knows(
    release: Build, base: Path
) -> None:
    knows = knows_memory_placement(release)
    machine = discover(write_fixture("xeon-2s-ht", base / "sys"))
    topology = base / "topology.json"
    topology.write_text(json.dumps({"cpus": machine.to_report_cpus()}))
    head = NodeAllocator(
        state_dir=base / "state",
        cdi_dir=base / "cdi",
        options=DeviceOptions(reserved=CPUSet.parse(RESERVED)),
    )
    await head.start(machine)
    placed = (await head.prepare(claim("placed", "cpudevnuma001", True))).record
    plain = (await head.prepare(claim("plain", "cpudevnuma000", False))).record
    assert placed.memory_nodes == CPUSet.parse("1") and not plain.memory_nodes
    kept = placed.memory_nodes if knows else CPUSet()  # what the release keeps of the placement

    socket, log = base / "a.sock", base / "release-allocator.log"
    process = spawn_allocator(release, base, topology, log)
    try:
        await serving(socket, process, log)
        async with channel(socket) as chan:
            stub = allocator_pb2_grpc.AllocatorStub(chan)
            for record in (placed, plain):
                got = await call(
                    stub.GetClaim(allocator_pb2.GetClaimRequest(claim_uid=record.uid), timeout=5),
                    "get claim",
                )
                expected = kept.format() if record is placed else ""
                assert (got.cpus, got.memory_nodes) == (record.cpus.format(), expected)
            container = allocator_pb2.ContainerRef(
                container_id="ctr-1", pod_uid=POD, pod_namespace="ns", pod_name="p",
                container_name="app",
            )  # fmt: skip
            request = allocator_pb2.AttachContainerRequest(
                container=container, claims={"placed": placed.cpus.format()}
            )
            attached = await call(stub.AttachContainer(request, timeout=5), "attach")
            # What this checkout's nri-plugin reads: cpus, and the memory nodes to set (none
            # from a release without memory placement: mems left alone).
            assert (attached.cpus, attached.memory_nodes) == (placed.cpus.format(), kept.format())
    finally:
        stop(process)
    assert "unknown format version" not in log.read_text()

    loaded = records.load_records(base / "state")
    assert loaded is not None and loaded.bad == []
    rewritten = loaded.records["placed"]  # the attach made the release write it
    assert rewritten.cpus == placed.cpus and rewritten.container_id == "ctr-1"
    assert rewritten.memory_nodes == kept  # a release before memory placement drops it, not CPUs
    assert loaded.records["plain"].memory_nodes == CPUSet()
