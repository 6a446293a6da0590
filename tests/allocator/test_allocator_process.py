"""The allocator as a process: every RPC over its unix socket, precise statuses, health,
version and metrics, waiting for the topology service, and one-line refusals of bad input."""

from __future__ import annotations

import asyncio
import functools
import json
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from allocator_process import spawn, stop
from harness.requests import prepare_request
from harness.services import wait_serving
from harness.waits import eventually

from dracpu.core.machine import Machine
from dracpu.core.rpc import channel
from dracpu.pb.allocator.v1 import allocator_pb2 as pb
from dracpu.pb.allocator.v1 import allocator_pb2_grpc
from dracpu.pb.common.v1 import info_pb2, info_pb2_grpc
from dracpu.topology.fixtures import write_fixture

# The claims of these tests are in namespace "ns", as their pods are.
grouped = functools.partial(prepare_request, namespace="ns")
Machines = Callable[[str], Machine]


def topology_file(machine: Machine, path: Path) -> Path:
    path.write_text(json.dumps({"cpus": machine.to_report_cpus()}))
    return path


class Running:
    def __init__(self, base: Path, process: subprocess.Popen[bytes]) -> None:
        self.base = base
        self.socket = base / "a.sock"
        self.process = process
        self.channel = channel(self.socket)
        self.stub = allocator_pb2_grpc.AllocatorStub(self.channel)


def allocator_args(base: Path, *extra: str) -> list[str]:
    return [
        "--socket",
        str(base / "a.sock"),
        "--state-dir",
        str(base / "state"),
        "--cdi-dir",
        str(base / "cdi"),
        *extra,
    ]


@pytest.fixture
async def allocator(short_tmp: Path, machines: Machines) -> AsyncIterator[Running]:
    report = topology_file(machines("xeon-2s-ht"), short_tmp / "topo.json")
    process = spawn(
        "dracpu.allocator.main",
        allocator_args(short_tmp, "--topology-file", str(report), "--reserved-cpus", "0,20"),
        short_tmp / "allocator.log",
    )
    running = Running(short_tmp, process)
    try:
        await wait_serving(running.socket, process, what="the allocator", timeout=20, interval=0.02)
        yield running
    finally:
        await running.channel.close()
        stop(process)


def ref(container_id: str, pod: str, name: str) -> Any:
    return pb.ContainerRef(
        container_id=container_id,
        pod_uid=pod,
        pod_namespace="ns",
        pod_name=pod,
        container_name=name,
    )


async def test_every_rpc(allocator: Running) -> None:
    stub = allocator.stub
    devices = await stub.ListDevices(pb.ListDevicesRequest())
    assert (devices.driver, devices.mode, devices.group_by) == ("dra.cpu", "grouped", "numanode")
    assert [d.name for d in devices.devices] == ["cpudevnuma000", "cpudevnuma001"]
    # 20 CPUs on node 0, less reserved CPU 0 and CPU 1 kept for the shared pool.
    assert devices.devices[0].capacity["dra.cpu/cpu"] == "17"
    assert devices.generation >= 1

    watch = stub.WatchSharedPool(pb.WatchSharedPoolRequest())
    first = await watch.read()
    assert first.cpus == "1-19,21-39" and first.reserved == "0,20" and first.online == "0-39"

    prepared = await stub.Prepare(grouped("u1", "4", cpu_config={"strategy": "spread"}))
    cpus = prepared.claim.cpus
    assert prepared.claim.policy == "spread" and not prepared.already_prepared
    assert prepared.claim.cdi_device_id == "dra.k8s.io/cpu=claim-u1"
    (device,) = prepared.devices
    assert device.cdi_device_ids == ["dra.k8s.io/cpu=claim-u1"]
    assert device.attributes["dra.cpu/allocatedNumCPUs"].int == 4
    assert device.attributes["resource.kubernetes.io/numaNode"].int == 0
    # Where the CPUs lie: spread takes one thread of each of 4 cores, so no core is whole.
    assert device.topology_known and device.policy == "spread" and device.cpus == cpus
    assert (list(device.numa_nodes), list(device.sockets)) == ([0], [0])
    assert len(device.l3_caches) == 1 and not device.whole_cores
    assert (allocator.base / "cdi" / "dra.k8s.io-cpu_claim-u1.json").exists()

    changed = await watch.read()
    assert changed.exclusive == cpus and changed.generation > first.generation

    again = await stub.Prepare(grouped("u1", "4"))
    assert again.already_prepared and again.claim.cpus == cpus

    claim = await stub.GetClaim(pb.GetClaimRequest(claim_uid="u1"))
    assert (claim.namespace, claim.name, claim.cpus) == ("ns", "claim-u1", cpus)
    assert [
        c.uid for c in (await stub.ListClaims(pb.ListClaimsRequest(namespace="ns"))).claims
    ] == ["u1"]
    assert not (await stub.ListClaims(pb.ListClaimsRequest(namespace="other"))).claims

    attached = await stub.AttachContainer(
        pb.AttachContainerRequest(container=ref("c1", "pod-a", "app"), claims={"u1": cpus})
    )
    assert attached.cpus == cpus and attached.newly_bound
    assert attached.shared_pool.exclusive == cpus

    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stub.AttachContainer(
            pb.AttachContainerRequest(container=ref("c2", "pod-a", "sidecar"), claims={"u1": cpus})
        )
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "ns/pod-a (uid pod-a) container 'app'" in (refused.value.details() or "")

    owned = await stub.GetClaim(pb.GetClaimRequest(claim_uid="u1"))
    assert owned.owner.container_name == "app" and owned.owner_running
    detached = await stub.DetachContainer(pb.DetachContainerRequest(container_id="c1"))
    assert list(detached.claim_uids) == ["u1"]
    assert not (await stub.GetClaim(pb.GetClaimRequest(claim_uid="u1"))).owner_running

    adopted = await stub.Adopt(
        pb.AdoptRequest(container=ref("c1b", "pod-a", "app"), claims={"u1": cpus, "lost": "30-31"})
    )
    outcomes = {o.claim_uid: o for o in adopted.outcomes}
    assert outcomes["u1"].accepted and not outcomes["u1"].recovered
    assert not outcomes["lost"].accepted and outcomes["lost"].quarantined
    assert not (allocator.base / "cdi" / "dra.k8s.io-cpu_claim-lost.json").exists()

    summary = await stub.GetSummary(pb.GetSummaryRequest())
    # Available: the 37 CPUs published (40 less reserved 0,20 and the floor, CPU 1) less the 4
    # claimed.
    assert (summary.allocated_cpus, summary.available_cpus, summary.reserved_cpus) == (4, 33, 2)
    assert (summary.active_claims, summary.online_cpus) == (1, 40)

    # Its container still runs: the CPUs stay out of the shared pool until it stops.
    released = await stub.Unprepare(pb.UnprepareRequest(claim_uid="u1"))
    assert released.was_prepared and released.released_cpus == ""
    assert (await stub.GetSharedPool(pb.GetSharedPoolRequest())).exclusive == cpus
    await stub.DetachContainer(pb.DetachContainerRequest(container_id="c1b"))
    assert (await stub.GetSharedPool(pb.GetSharedPoolRequest())).exclusive == ""
    assert not (await stub.Unprepare(pb.UnprepareRequest(claim_uid="u1"))).was_prepared
    assert not (allocator.base / "cdi" / "dra.k8s.io-cpu_claim-u1.json").exists()
    watch.cancel()

    info = info_pb2_grpc.InfoStub(allocator.channel)
    version = await info.GetVersion(info_pb2.GetVersionRequest())
    assert version.service == "allocator" and version.api_version == "dracpu.allocator.v1"
    metrics = (await info.GetMetrics(info_pb2.GetMetricsRequest())).text
    assert "dra_cpu_allocated_cpus 0.0" in metrics
    assert "dra_cpu_resource_claims_active 0.0" in metrics


@pytest.mark.parametrize(
    ("request_", "code", "fragment"),
    [
        (grouped("x", "1.5"), grpc.StatusCode.INVALID_ARGUMENT, "whole number"),
        (grouped("x", "2", device="cpudevnuma009"), grpc.StatusCode.NOT_FOUND, "no such device"),
        (grouped("x", "40"), grpc.StatusCode.RESOURCE_EXHAUSTED, "cannot take 40"),
        (grouped("bad/uid", "1"), grpc.StatusCode.INVALID_ARGUMENT, "is not a UID"),
        (
            grouped(
                "x",
                "2",
                configs=[pb.OpaqueConfig(source="FromClaim", driver="dra.cpu", parameters=b"[")],
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
            "not valid JSON",
        ),
    ],
    ids=["fractional", "unknown-device", "too-many", "bad-uid", "bad-config"],
)
async def test_refusals_have_precise_statuses(
    allocator: Running, request_: Any, code: grpc.StatusCode, fragment: str
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await allocator.stub.Prepare(request_)
    assert refused.value.code() == code
    assert fragment in (refused.value.details() or "")
    # Still serving, nothing recorded.
    assert not (await allocator.stub.ListClaims(pb.ListClaimsRequest())).claims


async def test_other_refusals(allocator: Running) -> None:
    stub = allocator.stub
    cases = [
        (stub.GetClaim(pb.GetClaimRequest(claim_uid="nope")), grpc.StatusCode.NOT_FOUND),
        (stub.Unprepare(pb.UnprepareRequest()), grpc.StatusCode.INVALID_ARGUMENT),
        (
            stub.AttachContainer(
                pb.AttachContainerRequest(container=ref("c", "p", "n"), claims={"nope": "1"})
            ),
            grpc.StatusCode.NOT_FOUND,
        ),
        (
            stub.AttachContainer(
                pb.AttachContainerRequest(container=ref("c", "", "n"), claims={"nope": "1"})
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
        ),
        (
            stub.Adopt(pb.AdoptRequest(container=ref("c", "p", "n"), claims={"x": "9-1"})),
            grpc.StatusCode.INVALID_ARGUMENT,
        ),
        (stub.DetachContainer(pb.DetachContainerRequest()), grpc.StatusCode.INVALID_ARGUMENT),
    ]
    for call, code in cases:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await call
        assert refused.value.code() == code


async def test_restart_keeps_prepared_claims(allocator: Running, machines: Machines) -> None:
    prepared = await allocator.stub.Prepare(grouped("keep", "3", device="cpudevnuma001"))
    assert stop(allocator.process) == 0
    assert not allocator.socket.exists()
    report = allocator.base / "topo.json"
    process = spawn(
        "dracpu.allocator.main",
        allocator_args(allocator.base, "--topology-file", str(report), "--reserved-cpus", "0,20"),
        allocator.base / "allocator.log",
    )
    try:
        await wait_serving(
            allocator.socket, process, what="the allocator", timeout=20, interval=0.02
        )
        async with channel(allocator.socket) as chan:
            stub = allocator_pb2_grpc.AllocatorStub(chan)
            claim = await stub.GetClaim(pb.GetClaimRequest(claim_uid="keep"))
            assert claim.cpus == prepared.claim.cpus
            again = await stub.Prepare(grouped("keep", "3", device="cpudevnuma001"))
            assert again.already_prepared and again.claim.cpus == prepared.claim.cpus
    finally:
        stop(process)


async def test_waits_for_the_topology_service(short_tmp: Path) -> None:
    topology_socket = short_tmp / "t.sock"
    allocator = spawn(
        "dracpu.allocator.main",
        allocator_args(short_tmp, "--topology-socket", str(topology_socket)),
        short_tmp / "allocator.log",
    )
    topology = None
    try:
        await wait_serving(
            short_tmp / "a.sock",
            allocator,
            what="the allocator",
            status="NOT_SERVING",
            timeout=20,
            interval=0.02,
        )
        async with channel(short_tmp / "a.sock") as chan:
            stub = allocator_pb2_grpc.AllocatorStub(chan)
            with pytest.raises(grpc.aio.AioRpcError) as early:
                await stub.ListDevices(pb.ListDevicesRequest())
            assert early.value.code() == grpc.StatusCode.UNAVAILABLE
            sysfs = write_fixture("epyc-2s-nps4", short_tmp / "sys")
            topology = spawn(
                "dracpu.topology.main",
                ["--socket", str(topology_socket), "--sysfs-root", str(sysfs)],
                short_tmp / "topology.log",
            )
            await wait_serving(
                short_tmp / "a.sock", allocator, what="the allocator", timeout=30, interval=0.02
            )
            devices = await stub.ListDevices(pb.ListDevicesRequest())
            assert [d.name for d in devices.devices] == [f"cpudevnuma{n:03d}" for n in range(8)]
    finally:
        assert stop(allocator) == 0
        if topology is not None:
            stop(topology)


async def test_follows_cpus_going_offline_and_pushes_the_new_devices(short_tmp: Path) -> None:
    sysfs = write_fixture("xeon-2s-ht", short_tmp / "sys")
    topology_socket = short_tmp / "t.sock"
    # The topology service re-reads its fixture often (no uevent announces a fixture's change)
    # and pushes what it finds; the allocator does not ask.
    topology = spawn(
        "dracpu.topology.main",
        ["--socket", str(topology_socket), "--sysfs-root", str(sysfs), "--watch-interval", "0.2"],
        short_tmp / "topology.log",
    )
    allocator = spawn(
        "dracpu.allocator.main",
        allocator_args(short_tmp, "--topology-socket", str(topology_socket)),
        short_tmp / "allocator.log",
    )
    try:
        await wait_serving(
            short_tmp / "a.sock", allocator, what="the allocator", timeout=30, interval=0.02
        )
        async with channel(short_tmp / "a.sock") as chan:
            stub = allocator_pb2_grpc.AllocatorStub(chan)
            before = await stub.ListDevices(pb.ListDevicesRequest())
            watch = stub.WatchDevices(pb.WatchDevicesRequest(), timeout=30)
            assert await watch.read() == before
            claim = (await stub.Prepare(grouped("u", "20", device="cpudevnuma001"))).claim
            assert claim.cpus == "10-19,30-39"
            # CPU 39 goes offline: the kernel's online list shrinks (replaced in one step, so
            # the topology service never reads a half-written file).
            online = sysfs / "devices/system/cpu/online"
            (sysfs / "online.new").write_text("0-38\n")
            (sysfs / "online.new").replace(online)

            async def shrunk() -> tuple[pb.ListDevicesResponse, dict[str, str]]:
                devices = await stub.ListDevices(pb.ListDevicesRequest())
                capacities = {d.name: d.capacity["dra.cpu/cpu"] for d in devices.devices}
                assert capacities["cpudevnuma001"] == "19", capacities
                return devices, capacities

            devices, capacities = await eventually(
                shrunk, "the devices without CPU 39", timeout=20, interval=0.1
            )
            assert devices.generation > before.generation
            assert capacities["cpudevnuma000"] == "19"  # CPU 0 kept for the shared pool
            # The watch sent it: the new devices, then the one holding CPU 39 Unhealthy.
            pushed = await watch.read()
            while pushed.health["cpudevnuma001"].status != "Unhealthy":
                pushed = await watch.read()
            assert pushed.devices == devices.devices and pushed.generation == devices.generation
            watch.cancel()
            pool = await stub.GetSharedPool(pb.GetSharedPoolRequest())
            assert pool.online == "0-38" and pool.cpus == "0-9,20-29"
            # The claim keeps its CPUs, the offline one included, and says so in the log.
            assert (await stub.GetClaim(pb.GetClaimRequest(claim_uid="u"))).cpus == claim.cpus
        assert "claim holds CPUs that went offline" in (short_tmp / "allocator.log").read_text()
    finally:
        stop(allocator)
        stop(topology)


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--no-such-flag"], "unrecognized arguments"),
        (["-v", "99"], "verbosity must be 0-10"),
        (["--topology-file", "/nonexistent/report.json"], "topology file /nonexistent/report.json"),
        (["--reserved-cpus", "3-1", "--topology-file", "x"], "reversed range"),
        (["--socket", "/tmp/" + "s" * 120], "unix socket path"),
        (
            ["--group-by", "machine", "--topology-file", "x"],
            "flags: groupBy 'machine' needs allocator 'external' (got 'cpumanager')",
        ),
        (["--allocator", "outside", "--topology-file", "x"], "invalid choice: 'outside'"),
    ],
    ids=[
        "unknown-flag",
        "verbosity",
        "missing-report",
        "bad-reserved",
        "long-socket",
        "machine-without-external",
        "unknown-allocator",
    ],
)
def test_bad_command_lines_are_one_line(short_tmp: Path, args: list[str], fragment: str) -> None:
    base = ["--socket", str(short_tmp / "a.sock"), "--state-dir", str(short_tmp / "s")]
    done = subprocess.run(
        [sys.executable, "-m", "dracpu.allocator.main", *base, *args],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2
    lines = [line for line in done.stderr.splitlines() if "deprecated flag" not in line]
    assert len(lines) == 1, done.stderr
    assert fragment in lines[0]
    assert "Traceback" not in done.stderr


def test_sigterm_while_waiting_for_topology_exits_cleanly(short_tmp: Path) -> None:
    process = spawn(
        "dracpu.allocator.main",
        allocator_args(short_tmp, "--topology-socket", str(short_tmp / "none.sock")),
        short_tmp / "allocator.log",
    )
    asyncio.run(
        wait_serving(
            short_tmp / "a.sock",
            process,
            what="the allocator",
            status="NOT_SERVING",
            timeout=20,
            interval=0.02,
        )
    )
    assert stop(process, signal.SIGTERM) == 0


def test_a_layout_v1_cannot_express_refuses_the_start_in_one_line(
    short_tmp: Path, machines: Machines
) -> None:
    report = topology_file(machines("smt4"), short_tmp / "topo.json")
    done = subprocess.run(
        [sys.executable, "-m", "dracpu.allocator.main",
         *allocator_args(short_tmp, "--topology-file", str(report), "--allocator", "external")],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == (
        "dracpu-allocator: error: device cpudevnuma000: dra.cpu/smtLayout: the V1 encoding "
        "covers 2-way SMT only, CPUs 0-3 are 4 threads of one core"
    )
    assert "Traceback" not in done.stderr
    assert not (short_tmp / "a.sock").exists()


async def test_individual_mode_warns_once_at_start(short_tmp: Path, machines: Machines) -> None:
    report = topology_file(machines("single-4c8t"), short_tmp / "topo.json")
    config = short_tmp / "config.yaml"
    config.write_text("cpuDeviceMode: individual\n")
    log = short_tmp / "allocator.log"
    args = allocator_args(short_tmp, "--topology-file", str(report), "--config", str(config))
    process = spawn("dracpu.allocator.main", args, log)
    try:
        await wait_serving(
            short_tmp / "a.sock", process, what="the allocator", timeout=20, interval=0.02
        )
    finally:
        stop(process)
    warned = [line for line in log.read_text().splitlines() if "is deprecated" in line]
    assert len(warned) == 1, warned
    assert warned[0].startswith("W")  # klog's severity letter: a warning
    assert "cpuDeviceMode 'individual' is deprecated" in warned[0]


async def test_packed_cpus_are_reported_as_whole_cores_of_their_numa_node(
    allocator: Running,
) -> None:
    prepared = await allocator.stub.Prepare(grouped("u-whole", "4", device="cpudevnuma001"))
    (device,) = prepared.devices
    assert device.topology_known and device.policy == "packed" and device.whole_cores
    assert (list(device.numa_nodes), list(device.sockets)) == ([1], [1])
    assert len(device.l3_caches) == 1
