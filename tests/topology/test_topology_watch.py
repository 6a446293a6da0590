"""The inventory pushed to its watchers: the current one first, then each change, whether the
kernel announced it (a uevent), the slow safety re-read found it, or a caller asked for a
rediscovery; nothing is sent while nothing changes."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import pytest
from harness import paths
from harness.services import wait_serving

from dracpu.core.rpc import channel
from dracpu.pb.topology.v1 import topology_pb2, topology_pb2_grpc
from dracpu.topology.fixtures import write_fixture
from dracpu.topology.uevents import KernelEvents, concerns_inventory, parse

KERNEL_CPU0_UEVENT = Path("/sys/devices/system/cpu/cpu0/uevent")
DEADLINE = 20.0


@pytest.mark.parametrize(
    ("datagram", "fields", "concerns"),
    [
        (
            b"offline@/devices/system/cpu/cpu3\0ACTION=offline\0DEVPATH=/devices/system/cpu/cpu3"
            b"\0SUBSYSTEM=cpu\0SEQNUM=4211\0",
            {"ACTION": "offline", "DEVPATH": "/devices/system/cpu/cpu3", "SUBSYSTEM": "cpu",
             "SEQNUM": "4211"},
            True,
        ),
        (
            b"online@/devices/system/memory/memory40\0ACTION=online\0SUBSYSTEM=memory\0",
            {"ACTION": "online", "SUBSYSTEM": "memory"},
            True,
        ),
        (
            b"add@/devices/virtual/net/veth0\0ACTION=add\0SUBSYSTEM=net\0",
            {"ACTION": "add", "SUBSYSTEM": "net"},
            False,
        ),
        (b"libudev\0\xfe\xed\xca\xfe", None, False),
        (b"garbage without a header", None, False),
    ],
    ids=["cpu-offline", "memory-online", "network-device", "udev-rebroadcast", "not-a-uevent"],
)  # fmt: skip
def test_a_kernel_uevent_is_read_and_judged(
    datagram: bytes, fields: dict[str, str] | None, concerns: bool
) -> None:
    parsed = parse(datagram)
    assert parsed == fields
    assert (parsed is not None and concerns_inventory(parsed)) is concerns


@pytest.fixture
def workdir() -> Iterator[Path]:
    with paths.short_tmp("topow") as path:
        yield path


def spawn(log: Path, *args: str) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "dracpu.topology.main", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
        )


@contextlib.asynccontextmanager
async def serving(workdir: Path, *args: str) -> AsyncIterator[tuple[Path, Path]]:
    """The topology service on the xeon-2s-ht fixture: its sysfs root and its socket."""
    root = write_fixture("xeon-2s-ht", workdir / "sys")
    socket = workdir / "t.sock"
    log = workdir / "topology.log"
    process = spawn(log, "--socket", str(socket), "--sysfs-root", str(root), *args)
    try:
        await wait_serving(socket, process, what="the topology service", log=log, timeout=30)
        yield root, socket
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=DEADLINE) == 0


def take_cpu_3_offline(root: Path) -> None:
    online = root / "devices/system/cpu/online"
    (root / "online.new").write_text("0-2,4-39\n")
    (root / "online.new").replace(online)


def bring_cpu_3_back(root: Path) -> None:
    online = root / "devices/system/cpu/online"
    (root / "online.new").write_text("0-39\n")
    (root / "online.new").replace(online)


async def test_the_watch_sends_the_inventory_then_only_its_changes(workdir: Path) -> None:
    async with serving(workdir, "--watch-interval", "0") as (root, socket), channel(socket) as chan:
        stub = topology_pb2_grpc.TopologyStub(chan)
        watch = stub.WatchInventory(topology_pb2.WatchInventoryRequest())
        first = await watch.read()
        assert first.online == "0-39" and len(first.cpus) == 40
        # A rediscovery that finds nothing new sends nothing ...
        await stub.Rediscover(topology_pb2.RediscoverRequest(), timeout=5)
        take_cpu_3_offline(root)
        # ... so the next message is the change.
        await stub.Rediscover(topology_pb2.RediscoverRequest(), timeout=5)
        changed = await watch.read()
        assert changed.online == "0-2,4-39" and changed.fingerprint != first.fingerprint
        bring_cpu_3_back(root)
        await stub.Rediscover(topology_pb2.RediscoverRequest(), timeout=5)
        back = await watch.read()
        assert back.online == "0-39" and back.fingerprint == first.fingerprint
        watch.cancel()


async def test_the_safety_reread_finds_a_change_no_uevent_announced(workdir: Path) -> None:
    async with (
        serving(workdir, "--watch-interval", "0.2") as (root, socket),
        channel(socket) as chan,
    ):
        watch = topology_pb2_grpc.TopologyStub(chan).WatchInventory(
            topology_pb2.WatchInventoryRequest(), timeout=DEADLINE
        )
        assert (await watch.read()).online == "0-39"
        take_cpu_3_offline(root)
        assert (await watch.read()).online == "0-2,4-39"
        watch.cancel()


def _kernel_uevents_writable() -> str:
    """Why the kernel cannot be made to send a CPU uevent here ("" when it can)."""
    if os.geteuid() != 0:
        return "writing a uevent file needs root"
    if not os.access(KERNEL_CPU0_UEVENT, os.W_OK):
        return f"{KERNEL_CPU0_UEVENT} is not writable (read-only sysfs)"
    return ""


async def test_a_kernel_cpu_uevent_makes_the_service_rediscover(workdir: Path) -> None:
    async def netlink_why() -> str:
        events = KernelEvents()
        why = events.open()
        events.close()
        return why

    why = _kernel_uevents_writable() or await netlink_why()
    if why:
        pytest.skip(why)
    # No safety re-read: only the kernel's uevent can make the service look again.
    async with serving(workdir, "--watch-interval", "0") as (root, socket), channel(socket) as chan:
        watch = topology_pb2_grpc.TopologyStub(chan).WatchInventory(
            topology_pb2.WatchInventoryRequest(), timeout=DEADLINE
        )
        assert (await watch.read()).online == "0-39"
        take_cpu_3_offline(root)
        # The kernel sends a "change" uevent for cpu0 (SUBSYSTEM=cpu) when asked to.
        KERNEL_CPU0_UEVENT.write_text("change")
        try:
            assert (await watch.read()).online == "0-2,4-39"
        except grpc.aio.AioRpcError as exc:
            pytest.fail(f"no new inventory after the kernel's uevent: {exc.code().name}")
        watch.cancel()
