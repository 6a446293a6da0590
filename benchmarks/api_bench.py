"""Latency of the api sidecar under a loopback load generator.

Starts the real services (topology on the 1024-CPU fixture, allocator, nri-plugin and
dra-plugin with the dev runner's runtime and kubelet simulators), prepares 1,000 one-CPU
claims through the allocator's Prepare RPC, starts `dracpu-api`, then for each of
GET /v1/claims and GET /metrics runs closed-loop HTTP clients (1, then 4 by default) for DURATION
seconds each and prints the median and p99 latency, after the latency of the allocator's
ListClaims alone, which every /v1/claims request includes.

    .venv/bin/python benchmarks/api_bench.py [--duration 10] [--concurrency 1,4] [--claims 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import httpx
from harness.api_stack import PodServices, start_api, stop_api
from harness.requests import prepare_request

from dracpu.core.driver import numa_device_name
from dracpu.core.rpc import channel
from dracpu.pb.allocator.v1 import allocator_pb2, allocator_pb2_grpc

TARGET_P99_MS = 50.0
PATHS = ("/v1/claims", "/metrics")
NUMA_NODES = 8  # big-1024: 8 NUMA nodes of 128 CPUs


async def _prepare(socket: str, claims: int) -> float:
    """Prepare `claims` one-CPU claims spread over the NUMA devices; return the seconds taken."""
    started = time.perf_counter()
    async with channel(socket) as chan:
        stub = allocator_pb2_grpc.AllocatorStub(chan)
        semaphore = asyncio.Semaphore(8)

        async def one(index: int) -> None:
            request = prepare_request(
                f"bench-{index:05d}",
                1,
                device=numa_device_name(index % NUMA_NODES),
                namespace=f"ns-{index % 10}",
                name=f"claim-{index}",
                pool="bench-node",
            )
            async with semaphore:
                await stub.Prepare(request, timeout=30)

        await asyncio.gather(*(one(i) for i in range(claims)))
    return time.perf_counter() - started


async def _list_claims_latency(socket: str, duration: float) -> list[float]:
    """What the api's biggest backend call costs by itself, to tell the two apart."""
    latencies: list[float] = []
    async with channel(socket) as chan:
        stub = allocator_pb2_grpc.AllocatorStub(chan)
        stop = time.monotonic() + min(duration, 5.0)
        while time.monotonic() < stop:
            started = time.perf_counter()
            await stub.ListClaims(allocator_pb2.ListClaimsRequest(), timeout=10)
            latencies.append(time.perf_counter() - started)
    return latencies


async def _load(url: str, path: str, duration: float, concurrency: int) -> tuple[list[float], int]:
    latencies: list[float] = []
    failures = 0
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=10) as http:
        await http.get(path)  # warm the connection and the api's channels
        stop = time.monotonic() + duration

        async def worker() -> None:
            nonlocal failures
            while time.monotonic() < stop:
                started = time.perf_counter()
                reply = await http.get(path)
                elapsed = time.perf_counter() - started
                if reply.status_code != 200:
                    failures += 1
                latencies.append(elapsed)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies, failures


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument(
        "--concurrency",
        default="1,4",
        help="comma-separated client counts; each is run for --duration per endpoint",
    )
    parser.add_argument("--claims", type=int, default=1000)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="apib-", dir="/tmp"))
    pod = PodServices(work, fixture="big-1024")
    api = None
    try:
        pod.start_all()
        took = asyncio.run(_prepare(pod.sockets["allocator"], args.claims))
        print(f"prepared {args.claims} claims through the real allocator in {took:.1f}s")
        api = start_api(pod)
        return asyncio.run(_measure(api.url, pod.sockets["allocator"], args))
    finally:
        if api is not None:
            stop_api(api)
        pod.stop_all()
        shutil.rmtree(work, ignore_errors=True)


async def _measure(url: str, allocator_socket: str, args: argparse.Namespace) -> int:
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        claims = (await http.get("/v1/claims")).json()["claims"]
        sizes = {path: len((await http.get(path)).content) for path in PATHS}
    assert len(claims) == args.claims, len(claims)
    baseline = await _list_claims_latency(allocator_socket, args.duration)
    print(
        f"allocator ListClaims alone (gRPC, 1 client, {len(baseline)} calls): "
        f"median={statistics.median(baseline) * 1000:6.2f} ms "
        f"p99={_percentile(baseline, 0.99) * 1000:6.2f} ms"
    )
    print(f"HTTP load on loopback, {args.duration:g}s per line; target p99 < {TARGET_P99_MS:g} ms")
    missed = False
    for concurrency in (int(c) for c in args.concurrency.split(",")):
        for path in PATHS:
            latencies, failures = await _load(url, path, args.duration, concurrency)
            p50 = statistics.median(latencies) * 1000
            p99 = _percentile(latencies, 0.99) * 1000
            missed |= p99 >= TARGET_P99_MS
            print(
                f"GET {path:<11} clients={concurrency} requests={len(latencies):>6} "
                f"rps={len(latencies) / args.duration:7.1f} median={p50:6.2f} ms "
                f"p99={p99:6.2f} ms body={sizes[path]} bytes failures={failures}"
            )
    print("p99 target " + ("MISSED" if missed else "met"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
