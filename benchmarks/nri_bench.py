"""NRI plugin latency through the real transport, with every peer a real process or the real
wire: `dracpu-allocator` (topology fixture xeon-2s-ht, 40 CPUs) and `dracpu-nri-plugin` run as
processes; this script is the runtime (dracpu.dev.runtime_sim, speaking mux + ttrpc on a unix
socket, emulating containerd 2.4 so unsolicited updates are on).

Measures:
  1. CreateContainer round trip (runtime -> plugin -> allocator -> runtime) for 1,000 shared
     containers, and for claimed containers (attach path): median and p99.
  2. Synchronize with 1,000 containers after a runtime restart (whole call, updates applied).
  3. Fan-out of a shared-pool change to 1,000 shared containers with UpdateContainers: from
     the allocator's answer to Prepare/Unprepare until every container runs on the new pool.

Targets: CreateContainer p99 < 5 ms; fan-out < 200 ms.

.venv/bin/python benchmarks/nri_bench.py [--containers N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from harness.requests import prepare_request
from harness.services import wait_serving

from dracpu.core.driver import numa_device_name
from dracpu.core.rpc import call, channel
from dracpu.dev.runtime_sim import RuntimeSim
from dracpu.pb.allocator.v1 import allocator_pb2, allocator_pb2_grpc
from dracpu.topology.discovery import discover
from dracpu.topology.fixtures import write_fixture

BIN = Path(sys.executable).parent
FIXTURE = "xeon-2s-ht"
CREATE_P99_TARGET_MS = 5.0
FANOUT_TARGET_MS = 200.0
FIRST_NUMA_DEVICE = numa_device_name(0)


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def report(name: str, samples_ms: list[float], target: str = "") -> None:
    median = statistics.median(samples_ms)
    p99 = percentile(samples_ms, 0.99)
    print(f"{name:<44} n={len(samples_ms):<5} median={median:8.3f} ms  p99={p99:8.3f} ms {target}")


async def prepare(socket: Path, count: int, device: str = FIRST_NUMA_DEVICE) -> tuple[str, str]:
    uid = str(uuid.uuid4())
    request = prepare_request(uid, count, device=device, namespace="bench", name=f"c-{uid[:8]}")
    async with channel(socket) as chan:
        reply = await call(allocator_pb2_grpc.AllocatorStub(chan).Prepare(request), "prepare")
    return uid, reply.claim.cpus


async def unprepare(socket: Path, uid: str) -> None:
    async with channel(socket) as chan:
        await call(
            allocator_pb2_grpc.AllocatorStub(chan).Unprepare(
                allocator_pb2.UnprepareRequest(claim_uid=uid)
            ),
            "unprepare",
        )


async def shared_pool(socket: Path) -> str:
    async with channel(socket) as chan:
        pool = await call(
            allocator_pb2_grpc.AllocatorStub(chan).GetSharedPool(
                allocator_pb2.GetSharedPoolRequest()
            ),
            "pool",
        )
    return str(pool.cpus)


async def fanout(runtime: RuntimeSim, ids: list[str], action: object) -> float:
    """Run `action` (returns the new pool) and time until every container runs on it."""
    started = time.perf_counter()
    pool = await action()  # type: ignore[operator]
    await runtime.wait_for(lambda: all(runtime.cpus(cid) == pool for cid in ids), timeout=30)
    return (time.perf_counter() - started) * 1e3


async def bench(containers: int, root: Path) -> None:
    machine = discover(write_fixture(FIXTURE, root / "sys"))
    report_file = root / "topology.json"
    report_file.write_text(json.dumps({"cpus": machine.to_report_cpus()}))
    alloc_sock, view_sock, nri_sock = root / "a.sock", root / "v.sock", root / "nri.sock"
    logs = (root / "allocator.log").open("wb"), (root / "plugin.log").open("wb")
    allocator = await asyncio.create_subprocess_exec(
        *[
            str(BIN / "dracpu-allocator"),
            "--socket",
            str(alloc_sock),
            "--topology-file",
            str(report_file),
            "--state-dir",
            str(root / "state"),
            "--cdi-dir",
            str(root / "cdi"),
            "--topology-refresh",
            "0",
        ],
        stdout=logs[0],
        stderr=subprocess.STDOUT,
    )
    await wait_serving(
        alloc_sock, allocator, what="the allocator", log=root / "allocator.log", timeout=60
    )
    runtime = RuntimeSim(str(nri_sock))
    await runtime.start()
    plugin = await asyncio.create_subprocess_exec(
        *[
            str(BIN / "dracpu-nri-plugin"),
            "--socket",
            str(view_sock),
            "--allocator-socket",
            str(alloc_sock),
            "--nri-socket",
            str(nri_sock),
        ],
        stdout=logs[1],
        stderr=subprocess.STDOUT,
    )
    try:
        await runtime.wait_plugin(timeout=60)
        pod = runtime.add_pod("bench", "bench")

        create_ms: list[float] = []
        ids: list[str] = []
        for i in range(containers):
            started = time.perf_counter()
            ids.append(await runtime.create_container(pod, f"c{i}", ["PATH=/bin"]))
            create_ms.append((time.perf_counter() - started) * 1e3)
        report(
            f"CreateContainer, shared ({containers} containers)",
            create_ms,
            f"[target p99 < {CREATE_P99_TARGET_MS} ms]",
        )

        claimed_ms: list[float] = []
        claims: list[str] = []
        claimed_ids: list[str] = []
        for i in range(16):
            uid, cpus = await prepare(alloc_sock, 2, numa_device_name(i % 2))
            claims.append(uid)
            owner = runtime.add_pod(f"claim{i}", "bench")
            started = time.perf_counter()
            cid = await runtime.create_container(owner, "app", [f"DRA_CPUSET_{uid}={cpus}"])
            claimed_ms.append((time.perf_counter() - started) * 1e3)
            claimed_ids.append(cid)
        report("CreateContainer, claimed (attach + shrink updates)", claimed_ms)
        # As the kubelet does: the pods go away, then their claims are unprepared.
        for cid in claimed_ids:
            await runtime.stop_container(cid)
            await runtime.remove_container(cid)
        for uid in claims:
            await unprepare(alloc_sock, uid)

        # Fan-out of a pool change to the shared containers (unsolicited UpdateContainers).
        full = await shared_pool(alloc_sock)
        await runtime.wait_for(lambda: all(runtime.cpus(c) == full for c in ids), timeout=30)

        async def shrink() -> str:
            uid, _ = await prepare(alloc_sock, 4)
            claims[:] = [uid]
            return await shared_pool(alloc_sock)

        async def grow() -> str:
            await unprepare(alloc_sock, claims[0])
            return await shared_pool(alloc_sock)

        shrink_ms, grow_ms = [], []
        for _ in range(5):
            shrink_ms.append(await fanout(runtime, ids, shrink))
            grow_ms.append(await fanout(runtime, ids, grow))
        target = f"[target < {FANOUT_TARGET_MS} ms]"
        report(f"pool shrink pushed to {containers} containers", shrink_ms, target)
        report(f"pool growth pushed to {containers} containers", grow_ms, target)

        # Synchronize with every container after a runtime restart.
        sync_ms: list[float] = []
        for _ in range(5):
            for cid in ids:
                runtime.containers[cid].linux.resources.cpu.cpus = "0"
            before = len(runtime.sync_seconds)
            await runtime.restart()
            await runtime.wait_for(lambda n=before: len(runtime.sync_seconds) > n, timeout=30)
            sync_ms.append(runtime.sync_seconds[-1] * 1e3)
            assert runtime.cpus(ids[0]) == full
        report(f"Synchronize with {containers} containers", sync_ms)
    finally:
        for process in (plugin, allocator):
            process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), 10)
            except TimeoutError:
                process.kill()
        await runtime.stop()
        for log in logs:
            log.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--containers", type=int, default=1000)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(dir="/tmp", prefix="nrib-"))
    try:
        asyncio.run(bench(args.containers, root))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
