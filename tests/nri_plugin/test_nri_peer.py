"""Against the real thing: the genuine containerd/nri runtime side (pkg/adaptation, built from
the pinned releases in tests/peers/nri) drives the `dracpu-nri-plugin` process, which asks the
real `dracpu-allocator` process for CPUs."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from harness.nri_bed import ONLINE, Allocator, claim_env, start_process, stop_process
from harness.services import wait_serving
from harness.waits import eventually
from logformats import klog_lines
from nri_peer import PEERS, GoRuntime, PeerVersion, missing_reason

from dracpu.core.clients.allocator import AllocatorClient
from dracpu.core.cpuset import CPUSet
from dracpu.core.retry import Backoff
from dracpu.core.rpc import call, channel
from dracpu.nri_plugin.cpu_plugin import CPUPlugin
from dracpu.nri_plugin.state.pacing import ALLOCATOR_CALL_TIMEOUT
from dracpu.nri_plugin.transport import mux
from dracpu.nri_plugin.transport.compat import UnsolicitedMode
from dracpu.nri_plugin.transport.stub import PluginStub
from dracpu.pb.nri_plugin.v1 import nri_plugin_pb2, nri_plugin_pb2_grpc

pytestmark = pytest.mark.peer

BIN = Path(sys.executable).parent
PRE_EXISTING = 300  # enough that the Synchronize answer spans many mux frames


def peer_params() -> list[object]:
    return [pytest.param(p, id=f"nri-{p.nri}") for p in PEERS]


def require(peer: PeerVersion) -> None:
    reason = missing_reason(peer)
    if reason:
        pytest.skip(reason)


async def seed(go: GoRuntime, claim: tuple[str, CPUSet]) -> None:
    """Containers the runtime already runs when the plugin connects."""
    await go.ok("add_pod", pod="p-pre", name="pre", namespace="default", uid="uid-pre")
    for i in range(PRE_EXISTING):
        await go.ok(
            "add_existing", pod="p-pre", id=f"pre{i:03d}", name=f"c{i}", env=["A=1"], cpus="0-7"
        )
    await go.ok("add_pod", pod="p-db", name="db", namespace="default", uid="uid-db")
    await go.ok(
        "add_existing", pod="p-db", id="db0", name="postgres", env=claim_env(claim), cpus="0-7"
    )


@contextlib.asynccontextmanager
async def plugin_process(root: Path, allocator: Allocator, nri_socket: Path) -> AsyncIterator[Path]:
    view = root / "nri-plugin.sock"
    log = root / "nri-plugin.log"
    process = start_process(
        [
            str(BIN / "dracpu-nri-plugin"),
            "--socket",
            str(view),
            "--allocator-socket",
            str(allocator.socket),
            "--nri-socket",
            str(nri_socket),
            "-v",
            "2",
        ],
        log,
    )
    try:
        await wait_serving(view, process, what="the nri-plugin", log=log)
        yield view
    finally:
        stop_process(process)


async def view_containers(view: Path) -> dict[str, nri_plugin_pb2.ContainerView]:
    async with channel(view) as chan:
        stub = nri_plugin_pb2_grpc.NRIPluginViewStub(chan)
        reply = await call(stub.ListContainers(nri_plugin_pb2.ListContainersRequest()), "list")
    return {c.container_id: c for c in reply.containers}


async def view_status(view: Path) -> nri_plugin_pb2.PluginStatus:
    async with channel(view) as chan:
        stub = nri_plugin_pb2_grpc.NRIPluginViewStub(chan)
        return await call(stub.GetStatus(nri_plugin_pb2.GetStatusRequest()), "status")


@pytest.mark.parametrize("peer", peer_params())
async def test_real_runtime_drives_the_plugin(
    peer: PeerVersion, allocator: Allocator, short_tmp: Path
) -> None:
    require(peer)
    nri_socket = short_tmp / "nri.sock"
    go = await GoRuntime.start(peer, nri_socket, short_tmp / "go.log")
    try:
        pre_uid, pre_cpus = await allocator.prepare(2)
        await seed(go, (pre_uid, pre_cpus))
        async with plugin_process(short_tmp, allocator, nri_socket) as view:
            pool = ONLINE - pre_cpus
            sync = await go.ok("wait_plugin", timeout_ms=30000)
            synced = {u["id"]: u["cpus"] for u in sync["sync_updates"]}
            assert synced["db0"] == pre_cpus.format()
            assert {synced[f"pre{i:03d}"] for i in range(PRE_EXISTING)} == {pool.format()}
            listed = await view_containers(view)
            assert len(listed) == PRE_EXISTING + 1
            assert listed["db0"].exclusive and list(listed["db0"].claim_uids) == [pre_uid]
            status = await view_status(view)
            assert status.connected and status.runtime_name == peer.runtime_name
            assert status.unsolicited_updates is peer.unsolicited_by_default

            # A shared container whose request is far larger than one 4096-byte frame.
            await go.ok("add_pod", pod="p-web", name="web", namespace="default", uid="uid-web")
            big_env = ["A=1", "BIG=" + "x" * 20000]
            web = await go.ok("create", pod="p-web", id="web1", name="nginx", env=big_env)
            assert web["adjust_cpus"] == pool.format()

            # A claimed container: pinned, and every shared container shrinks.
            uid, cpus = await allocator.prepare(2)
            smaller = pool - cpus
            await go.ok("add_pod", pod="p-app", name="app", namespace="default", uid="uid-app")
            app = await go.ok(
                "create", pod="p-app", id="app1", name="app", env=claim_env((uid, cpus))
            )
            assert app["adjust_cpus"] == cpus.format()
            shared_ids = {f"pre{i:03d}" for i in range(PRE_EXISTING)} | {"web1"}
            if not peer.unsolicited_by_default:
                assert {u["id"] for u in app["updates"]} == shared_ids
                assert {u["cpus"] for u in app["updates"]} == {smaller.format()}

            async def shared_on(expected: CPUSet) -> bool:
                now = await go.cpus()
                return all(now[i] == expected.format() for i in shared_ids)

            await eventually(
                lambda: shared_on(smaller), "shared containers on the smaller pool", interval=0.02
            )

            # Refusals come back to the runtime as errors (CreateContainerError upstream).
            bad = await go.call(
                "create", pod="p-app", id="bad1", name="bad", env=[f"DRA_CPUSET_{uid}=1-x"]
            )
            assert not bad["ok"] and "malformed DRA env entry" in bad["error"]
            dup = await go.call(
                "create", pod="p-web", id="dup1", name="dup", env=claim_env((uid, cpus))
            )
            assert not dup["ok"] and uid in dup["error"]

            # Stop and removal (StateChange before v0.12, RemoveContainer from v0.12).
            assert (await go.ok("stop", id="app1")).get("updates") is None
            await go.ok("remove", id="app1")
            assert "app1" not in await view_containers(view)

            # Unprepare grows the pool: pushed where safe, else at the next create.
            await allocator.unprepare(uid)
            if peer.unsolicited_by_default:
                await eventually(
                    lambda: shared_on(pool), "unsolicited push of the larger pool", interval=0.02
                )
                pushed = (await go.ok("unsolicited")).get("unsolicited") or []
                assert sum(len(batch) for batch in pushed) >= len(shared_ids)
            else:
                await eventually(
                    lambda: _plugin_pool_is(view, pool),
                    "plugin to see the larger pool",
                    interval=0.02,
                )
                await go.ok("create", pod="p-web", id="web2", name="late", env=["A=1"])
                assert await shared_on(pool)
                assert not (await go.ok("unsolicited")).get("unsolicited")
    finally:
        await go.close()


@pytest.mark.parametrize("peer", peer_params())
async def test_runtime_restart_resynchronizes(
    peer: PeerVersion, allocator: Allocator, short_tmp: Path
) -> None:
    """The runtime process goes away and comes back with its containers; the plugin
    reconnects with backoff, registers again and re-applies every cpuset."""
    require(peer)
    nri_socket = short_tmp / "nri.sock"
    uid, cpus = await allocator.prepare(2)
    go = await GoRuntime.start(peer, nri_socket, short_tmp / "go.log")
    try:
        await seed(go, (uid, cpus))
        async with plugin_process(short_tmp, allocator, nri_socket) as view:
            await go.ok("wait_plugin", timeout_ms=30000)
            await go.close()
            await eventually(
                lambda: _disconnected(view), "plugin to notice the runtime left", interval=0.02
            )
            # The new runtime knows its containers before it opens the socket.
            go = await GoRuntime.start(peer, nri_socket, short_tmp / "go2.log", listen=False)
            await seed(go, (uid, cpus))
            await go.ok("start")
            sync = await go.ok("wait_plugin", timeout_ms=30000)
            synced = {u["id"]: u["cpus"] for u in sync["sync_updates"]}
            assert synced["db0"] == cpus.format()
            assert synced["pre000"] == (ONLINE - cpus).format()
            assert (await view_status(view)).connected
    finally:
        await go.close()


@pytest.mark.parametrize("peer", peer_params())
async def test_a_synchronize_over_4_mib_arrives_in_chunks(
    peer: PeerVersion, allocator: Allocator, short_tmp: Path
) -> None:
    """The runtime's first Synchronize is refused by its own ttrpc client as oversized, so it
    resends in chunks with more=true (NRI >= v0.7); the plugin must answer those with no
    updates and more=true, and the real answer to the last one."""
    require(peer)
    nri_socket = short_tmp / "nri.sock"
    go = await GoRuntime.start(peer, nri_socket, short_tmp / "go.log", listen=False)
    try:
        padding = "P=" + "p" * 8000
        count = 600  # 600 x 8 kB of env: ~4.8 MB, over ttrpc's 4 MiB limit
        # One pod per container: upstream shrinks pods and containers per chunk by the same
        # factor, and with a single pod its share truncates to 0 and the split never ends.
        for i in range(count):
            pod = f"p-big{i:03d}"
            await go.ok("add_pod", pod=pod, name=pod, namespace="default", uid=f"uid-{pod}")
            await go.ok("add_existing", pod=pod, id=f"big{i:03d}", name="c", env=[padding])
        await go.ok("start")
        async with plugin_process(short_tmp, allocator, nri_socket) as view:
            sync = await go.ok("wait_plugin", timeout_ms=60000)
            assert len(sync["sync_updates"]) == count
            assert {u["cpus"] for u in sync["sync_updates"]} == {ONLINE.format()}
            assert len(await view_containers(view)) == count
        chunks = [
            line.values["chunks"]
            for line in klog_lines(_plugin_log(short_tmp))
            if line.msg == "synchronize request"
        ]
        assert chunks and int(chunks[-1]) > 1
    finally:
        await go.close()


def _plugin_log(root: Path) -> str:
    return (root / "nri-plugin.log").read_text(errors="replace")


async def _plugin_pool_is(view: Path, pool: CPUSet) -> bool:
    return (await view_status(view)).shared_pool == pool.format()


async def _disconnected(view: Path) -> bool:
    return not (await view_status(view)).connected


async def test_one_big_frame_is_what_the_go_reader_cannot_take(
    allocator: Allocator, short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Confirms the interop caution behind mux.frame_message: a message sent as one frame
    larger than 4096 bytes makes the Go mux reader fail (ENOMEM) and drop the plugin. The same
    Synchronize cut as frame_message cuts it is accepted (test_real_runtime_drives_the_plugin)."""
    peer = PEERS[0]
    require(peer)
    monkeypatch.setattr(mux, "GO_READ_BUFFER", mux.MAX_FRAME_PAYLOAD)
    nri_socket = short_tmp / "nri.sock"
    go = await GoRuntime.start(peer, nri_socket, short_tmp / "go.log")
    uid, cpus = await allocator.prepare(2)
    await seed(go, (uid, cpus))
    client = AllocatorClient(str(allocator.socket), timeout=ALLOCATOR_CALL_TIMEOUT)
    plugin = CPUPlugin(client, unsolicited=UnsolicitedMode.OFF)
    stub = PluginStub(str(nri_socket), plugin, backoff=Backoff(initial=5.0, maximum=5.0))
    task = asyncio.create_task(stub.run())
    try:
        # The Go mux conn refuses the frame (ENOMEM); ttrpc then reports the plugin closed.
        async def refused() -> bool:
            return "failed to synchronize plugin" in go.log_text()

        await eventually(refused, "the runtime to drop the plugin", interval=0.02)
        answer = await go.call("wait_plugin", timeout_ms=1)
        assert not answer["ok"]
    finally:
        stub.stop()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await client.close()
        await go.close()
