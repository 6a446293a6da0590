"""The floor of the pod's shape: what five Python processes that hold gRPC cost before any of
the driver's code, idle.

The design runs the driver as five containers, four gRPC services (topology, allocator,
dra-plugin, nri-plugin) and the api (FastAPI over uvicorn, a gRPC client of the others). This
starts the same number of processes holding only what that shape needs, none of the driver:

- `grpc` (four of them): asyncio, a `grpc.aio` server on a unix socket with the standard health
  service, and prometheus_client imported (every service exports metrics);
- `api` (one): the same, plus FastAPI with one route served by uvicorn on loopback (its main
  loop asleep until stopped, without uvicorn's tick ten times a second, as the driver's api
  runs it) and a `grpc.aio` channel kept open to the first `grpc` process;
- with `--kubernetes`, the official Kubernetes client imported into one `grpc` process, as the
  dra-plugin holds it to reach the API server.

Once each answers (a health check, a GET) and a `--settle` pause has passed, each process's
user + system time from /proc/<pid>/stat over `--idle` seconds in which nobody calls it (in
millicores, a thousandth of a CPU), its threads, and its anonymous memory (`RssAnon`) and PSS
(`smaps_rollup`). Prints one line per kind and one for the shape's total against the driver
pod's targets (idle CPU 2 millicores, memory 100 MiB):

    floor: kind=<k> processes=<n> idle_millicores=<m> threads=<n> anon_mib=<m> pss_mib=<m>
    floor: total processes=5 idle_millicores=<sum> anon_mib=<sum> pss_mib=<sum> ...

(each kind's figures the median of its processes; the total the sum of all five).

With `--prepare N`, then the floor of a prepare's path in the same shape: a caller (a process
of its own, as the kubelet is) makes N unary calls one after another to a first `grpc` process,
which calls a second over its kept channel; the second writes a record of the call durably
(a temp file, fdatasync, rename, fsync of the folder, as the allocator writes a claim record)
and answers, and the first writes a small file atomically without a sync (as the CDI spec) and
answers. Raw bytes, no protobuf, no claim read from an API server: less than a prepare does.
Then the same calls removing each record durably (unlink, fsync of the folder: an unprepare's
floor), the calls without any sync, and one hop alone. Prints mean, p50 and p99 in ms:

    floor: path=<p> calls=<n> mean_ms=<x> p50_ms=<x> p99_ms=<x>

Usage: python benchmarks/floor_bench.py [--idle SECONDS] [--settle SECONDS] [--kubernetes]
                                        [--prepare N] [--state-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from harness.dev_up import free_port
from harness.waits import wait_for

GRPC_PROCESS = """
import asyncio, sys
import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
import prometheus_client  # noqa: F401  every service exports metrics
if {kubernetes}:
    import kubernetes  # noqa: F401  the dra-plugin's client of the API server

async def main() -> None:
    server = grpc.aio.server()
    health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)
    server.add_insecure_port("unix://" + sys.argv[1])
    await server.start()
    await server.wait_for_termination()

asyncio.run(main())
"""

HOP_PROCESS = """
import asyncio, os, sys, tempfile
import grpc

socket, upstream, folder = sys.argv[1], sys.argv[2], sys.argv[3]

def write(name: str, data: bytes, durable: bool) -> None:
    fd, temp = tempfile.mkstemp(dir=folder, prefix="." + name)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
        handle.flush()
        if durable:
            os.fdatasync(handle.fileno())
    os.replace(temp, os.path.join(folder, name))
    if durable:
        directory = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)

async def main() -> None:
    channel = grpc.aio.insecure_channel("unix://" + upstream) if upstream else None
    forward = channel.unary_unary("/floor.Hop/Call") if channel else None

    async def call(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        name, _, flags = request.decode().partition(":")
        if forward is not None:  # the first hop: the second's answer, then the spec
            answer = await forward(request, timeout=30)
            write(name + ".spec", answer * 8, durable=False)
            return answer
        if "durable" in flags:  # the second hop: the record
            write(name + ".record", request * 8, durable=True)
        elif "remove" in flags:  # the record removed, the removal made durable
            try:
                os.unlink(os.path.join(folder, name + ".record"))
            except FileNotFoundError:
                pass
            directory = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)
        return request

    handler = grpc.method_handlers_generic_handler(
        "floor.Hop", {{"Call": grpc.unary_unary_rpc_method_handler(call)}}
    )
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port("unix://" + socket)
    await server.start()
    await server.wait_for_termination()

asyncio.run(main())
"""

CALLER = """
import json, sys, time
import grpc

socket, calls, flags = sys.argv[1], int(sys.argv[2]), sys.argv[3]
with grpc.insecure_channel("unix://" + socket) as channel:
    call = channel.unary_unary("/floor.Hop/Call")
    call(b"warm:" + flags.encode(), timeout=30)
    took = []
    for n in range(calls):
        began = time.perf_counter()
        call(f"claim-{{n}}:{{flags}}".encode(), timeout=30)
        took.append(time.perf_counter() - began)
print(json.dumps(took))
"""

API_PROCESS = """
import asyncio, sys
import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
import prometheus_client  # noqa: F401
import uvicorn
from fastapi import FastAPI

app = FastAPI()

@app.get("/v1/node")
async def node() -> dict[str, str]:
    return {{"name": "floor"}}

class Server(uvicorn.Server):
    async def main_loop(self) -> None:  # no 0.1 s tick: asleep until stopped
        await asyncio.Event().wait()

async def main() -> None:
    channel = grpc.aio.insecure_channel("unix://" + sys.argv[1])
    await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=30)
    config = uvicorn.Config(app, host="127.0.0.1", port=int(sys.argv[2]), log_level="warning")
    await Server(config).serve()

asyncio.run(main())
"""


@dataclass
class Process:
    kind: str
    popen: subprocess.Popen[bytes]

    def cpu_ticks(self) -> int:
        fields = Path(f"/proc/{self.popen.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime + stime

    def status(self, key: str) -> int:
        for line in Path(f"/proc/{self.popen.pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
        return 0

    def pss_kib(self) -> int:
        for line in Path(f"/proc/{self.popen.pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
        return 0


def healthy(socket: Path) -> bool:
    done = subprocess.run(
        [sys.executable, "-c", HEALTH_CHECK, str(socket)], capture_output=True, check=False
    )
    return done.returncode == 0


HEALTH_CHECK = """
import sys, grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
with grpc.insecure_channel("unix://" + sys.argv[1]) as channel:
    health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
"""


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def prepare_floor(calls: int, state_dir: Path, env: dict[str, str]) -> None:
    """The two hops of a prepare's path, timed from a caller of their own (see the module
    docstring); one line per path."""
    with tempfile.TemporaryDirectory(prefix="dracpu-floor-") as sockets:
        state = Path(tempfile.mkdtemp(prefix="dracpu-floor-", dir=state_dir))
        second, first = Path(sockets) / "second.sock", Path(sockets) / "first.sock"
        hops = []
        try:
            for socket, upstream in ((second, ""), (first, str(second))):
                code = HOP_PROCESS.format()
                argv = [sys.executable, "-c", code, str(socket), upstream, str(state)]
                hops.append(subprocess.Popen(argv, env=env))
                wait_for(socket.exists, f"{socket.name} listening", timeout=120)
            paths = (
                ("two_hops_durable_record", first, "durable"),
                ("two_hops_durable_removal", first, "remove"),
                ("two_hops_no_sync", first, ""),
                ("one_hop_no_sync", second, ""),
            )
            for label, socket, flags in paths:
                done = subprocess.run(
                    [sys.executable, "-c", CALLER.format(), str(socket), str(calls), flags],
                    env=env, capture_output=True, text=True, check=True, timeout=600,
                )  # fmt: skip
                ms = [t * 1000 for t in json.loads(done.stdout)]
                print(
                    f"floor: path={label} calls={calls} mean_ms={statistics.fmean(ms):.2f} "
                    f"p50_ms={statistics.median(ms):.2f} p99_ms={percentile(ms, 0.99):.2f}"
                )
        finally:
            for hop in hops:
                hop.kill()
                hop.wait(30)
            shutil.rmtree(state, ignore_errors=True)


def answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/node", timeout=5) as reply:
            return bool(reply.status == 200)
    except OSError:
        return False


def main() -> int:
    parser = argparse.ArgumentParser(prog="floor_bench.py", description=__doc__.split("\n")[0])
    parser.add_argument("--idle", type=float, default=120.0, help="idle window (default 120 s)")
    parser.add_argument("--settle", type=float, default=10.0, help="pause before it (10 s)")
    parser.add_argument(
        "--kubernetes", action="store_true", help="the Kubernetes client in one gRPC process"
    )
    parser.add_argument(
        "--prepare", type=int, default=300, help="calls of the prepare path's floor (0: none)"
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=Path("/var/tmp"),
        help="where the durable records go: a disk, as the allocator's state dir (/var/tmp)",
    )
    args = parser.parse_args()
    env = {**os.environ, "MALLOC_ARENA_MAX": "2"}  # as the images set it
    hz = os.sysconf("SC_CLK_TCK")
    processes: list[Process] = []
    with tempfile.TemporaryDirectory(prefix="dracpu-floor-") as folder:
        sockets = [Path(folder) / f"grpc-{n}.sock" for n in range(4)]
        try:
            for n, socket in enumerate(sockets):
                code = GRPC_PROCESS.format(kubernetes=bool(args.kubernetes and n == 2))
                popen = subprocess.Popen([sys.executable, "-c", code, str(socket)], env=env)
                processes.append(Process("grpc", popen))
            for socket in sockets:
                wait_for(lambda s=socket: healthy(s), f"health of {socket.name}", timeout=120)
            port = free_port()
            code = API_PROCESS.format()
            api = subprocess.Popen(
                [sys.executable, "-c", code, str(sockets[0]), str(port)], env=env
            )
            processes.append(Process("api", api))
            wait_for(lambda: answers(port), "the api's GET", timeout=120)
            time.sleep(args.settle)
            before = [p.cpu_ticks() for p in processes]
            began = time.monotonic()
            time.sleep(args.idle)
            seconds = time.monotonic() - began
            after = [p.cpu_ticks() for p in processes]
            millicores = [(a - b) / hz / seconds * 1000 for a, b in zip(after, before, strict=True)]
            anon = [p.status("RssAnon") / 1024 for p in processes]
            pss = [p.pss_kib() / 1024 for p in processes]
            threads = [p.status("Threads") for p in processes]
        finally:
            for process in processes:
                process.popen.kill()  # idle numbers taken: no graceful stop needed
            for process in processes:
                process.popen.wait(30)
    for kind in ("grpc", "api"):
        index = [i for i, p in enumerate(processes) if p.kind == kind]
        print(
            f"floor: kind={kind} processes={len(index)} "
            f"idle_millicores={statistics.median(millicores[i] for i in index):.2f} "
            f"threads={statistics.median(threads[i] for i in index):.0f} "
            f"anon_mib={statistics.median(anon[i] for i in index):.1f} "
            f"pss_mib={statistics.median(pss[i] for i in index):.1f}"
        )
    if args.kubernetes:
        print(f"floor: kind=grpc+kubernetes anon_mib={anon[2]:.1f} pss_mib={pss[2]:.1f}")
    print(
        f"floor: total processes={len(processes)} idle_millicores={sum(millicores):.2f} "
        f"anon_mib={sum(anon):.1f} pss_mib={sum(pss):.1f} (targets 2 and 100; "
        f"idle window {seconds:.0f} s)"
    )
    if args.prepare:
        prepare_floor(args.prepare, args.state_dir, env)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
