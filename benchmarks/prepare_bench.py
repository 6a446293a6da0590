"""NodePrepareResources and NodeUnprepareResources round trips as the kubelet sees them.

Starts the topology service (on the 1024-CPU fixture), the allocator and the dra-plugin as
separate processes on temporary unix sockets, with the API-server fake (`dracpu.dev.apiserver`,
one more process) as the claim source,
and registers through the kubelet stand-in. Then times one NodePrepareResources call per claim
(each asks for 1 CPU of a NUMA device): 1,000 claims one after another, and 1,000 claims from
8 concurrent callers. Every prepare is durable (the allocator's claim record is fsynced) and
writes the CDI specs and the device metadata files. The sequential claims are then unprepared one
by one, each NodeUnprepareResources timed the same way.

For comparison it first times the allocator's Prepare and Unprepare alone (same socket, no
dra-plugin). Prints mean, median (p50) and p99 in milliseconds. Targets: p99 under 10 ms;
the kubelet's mean (what its dra_grpc_operations_duration_seconds histogram averages) at most
5 ms for a prepare and 2 ms for an unprepare.
Usage: python benchmarks/prepare_bench.py [--claims N] [--callers N] [--fixture NAME]
                                          [--base-dir DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import yaml
from harness.requests import prepare_request
from harness.services import wait_serving

from dracpu.core import rpc
from dracpu.core.driver import CPU_CAPACITY, DRIVER_NAME, numa_device_name
from dracpu.dev.apiserver.client import ClusterClient
from dracpu.dev.apiserver.process import FakeProcess
from dracpu.dev.kubelet_sim import Claim, KubeletSim, RegisteredPlugin
from dracpu.pb.allocator.v1 import allocator_pb2, allocator_pb2_grpc
from dracpu.topology.fixtures import write_fixture

BIN = Path(sys.executable).parent
NODE = "bench-node"


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def report(label: str, samples: list[float], wall: float) -> None:
    ms = [s * 1000 for s in samples]
    print(
        f"{label:<28} n={len(ms):<5} mean={statistics.fmean(ms):7.3f} ms  "
        f"p50={statistics.median(ms):7.3f} ms  "
        f"p99={percentile(ms, 0.99):7.3f} ms  max={max(ms):7.3f} ms  "
        f"throughput={len(ms) / wall:7.1f} claims/s"
    )


def write_claims(cluster: ClusterClient, prefix: str, count: int, numa_nodes: int) -> list[Claim]:
    claims = []
    for i in range(count):
        uid, name = str(uuid.uuid4()), f"{prefix}-{i}"
        obj = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "bench", "uid": uid},
            "spec": {"devices": {"requests": []}},
            "status": {
                "allocation": {
                    "devices": {
                        "results": [
                            {
                                "request": "cpus",
                                "driver": DRIVER_NAME,
                                "pool": NODE,
                                "device": numa_device_name(i % numa_nodes),
                                "consumedCapacity": {CPU_CAPACITY: "1"},
                            }
                        ]
                    }
                }
            },
        }
        cluster.write_claim(obj)
        claims.append(Claim("bench", name, uid))
    return claims


async def timed_prepare(plugin: RegisteredPlugin, claim: Claim, samples: list[float]) -> None:
    start = time.perf_counter()
    answer = await plugin.prepare([claim])
    samples.append(time.perf_counter() - start)
    if answer[claim.uid].error:
        raise SystemExit(f"prepare {claim.name} failed: {answer[claim.uid].error}")


async def run(args: argparse.Namespace) -> None:
    root = Path(tempfile.mkdtemp(prefix="pb", dir=args.base_dir))
    procs: list[subprocess.Popen[bytes]] = []
    apiserver = FakeProcess(root / "apiserver")
    try:
        sysfs = write_fixture(args.fixture, root / "sys")
        config = root / "config.yaml"
        config.write_text(yaml.safe_dump({"hostnameOverride": NODE}))
        cluster = apiserver.start().client()
        log_file = root / "services.log"
        log = log_file.open("wb")

        def spawn(argv: list[str]) -> subprocess.Popen[bytes]:
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
            procs.append(proc)
            return proc

        topo = spawn([str(BIN / "dracpu-topology"), "--socket", str(root / "t.sock"),
                      "--sysfs-root", str(sysfs)])  # fmt: skip
        await wait_serving(root / "t.sock", topo, what="topology", log=log_file, timeout=60)
        alloc = spawn([str(BIN / "dracpu-allocator"), "--socket", str(root / "a.sock"),
                       "--topology-socket", str(root / "t.sock"), "--state-dir",
                       str(root / "state"), "--cdi-dir", str(root / "cdi"),
                       "--config", str(config)])  # fmt: skip
        await wait_serving(root / "a.sock", alloc, what="allocator", log=log_file, timeout=60)
        plugin_proc = spawn([str(BIN / "dracpu-dra-plugin"), "--socket", str(root / "p.sock"),
                             "--allocator-socket", str(root / "a.sock"), "--kubelet-root-dir",
                             str(root / "k"), "--kubeconfig", str(apiserver.kubeconfig),
                             "--cdi-dir", str(root / "cdi"), "--config", str(config)])  # fmt: skip
        await wait_serving(
            root / "p.sock", plugin_proc, what="dra-plugin", log=log_file, timeout=60
        )
        plugin = await KubeletSim(root / "k").register(DRIVER_NAME, timeout=30)
        numa = len(list((sysfs / "devices/system/node").glob("node[0-9]*")))

        print(
            f"fixture={args.fixture} claims={args.claims} callers={args.callers} numa={numa} "
            f"base-dir={args.base_dir}"
        )
        warm = write_claims(cluster, "warm", 20, numa)
        for c in warm:
            await timed_prepare(plugin, c, [])
        await plugin.unprepare(warm)

        # The allocator alone, over the same socket, for the share of the round trip it takes.
        direct = write_claims(cluster, "direct", args.claims, numa)
        samples: list[float] = []
        async with rpc.channel(root / "a.sock") as chan:
            stub = allocator_pb2_grpc.AllocatorStub(chan)
            start = time.perf_counter()
            for i, c in enumerate(direct):
                request = prepare_request(
                    c.uid, 1, device=numa_device_name(i % numa), namespace=c.namespace,
                    name=c.name, pool=NODE,
                )  # fmt: skip
                began = time.perf_counter()
                await stub.Prepare(request)
                samples.append(time.perf_counter() - began)
            report("allocator Prepare alone", samples, time.perf_counter() - start)
            samples = []
            start = time.perf_counter()
            for c in direct:
                began = time.perf_counter()
                await stub.Unprepare(allocator_pb2.UnprepareRequest(claim_uid=c.uid))
                samples.append(time.perf_counter() - began)
            report("allocator Unprepare alone", samples, time.perf_counter() - start)

        sequential = write_claims(cluster, "seq", args.claims, numa)
        samples = []
        start = time.perf_counter()
        for c in sequential:
            await timed_prepare(plugin, c, samples)
        report("sequential", samples, time.perf_counter() - start)
        samples = []
        start = time.perf_counter()
        for c in sequential:
            began = time.perf_counter()
            answer = await plugin.unprepare([c])
            samples.append(time.perf_counter() - began)
            if answer.get(c.uid):
                raise SystemExit(f"unprepare {c.name} failed: {answer[c.uid]}")
        report("sequential unprepare", samples, time.perf_counter() - start)

        concurrent = write_claims(cluster, "par", args.claims, numa)
        samples = []
        queue: asyncio.Queue[Claim] = asyncio.Queue()
        for c in concurrent:
            queue.put_nowait(c)

        async def caller() -> None:
            while not queue.empty():
                await timed_prepare(plugin, queue.get_nowait(), samples)

        start = time.perf_counter()
        await asyncio.gather(*(caller() for _ in range(args.callers)))
        report(f"{args.callers} concurrent callers", samples, time.perf_counter() - start)
        await plugin.close()
    finally:
        for proc in reversed(procs):
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        apiserver.stop()
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--claims", type=int, default=1000)
    parser.add_argument("--callers", type=int, default=8)
    parser.add_argument("--fixture", default="big-1024")
    parser.add_argument(
        "--base-dir",
        default="/tmp",
        help="where state, CDI specs and sockets live (/dev/shm takes the disk's fsync out)",
    )
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
