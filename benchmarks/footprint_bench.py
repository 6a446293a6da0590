"""The pod's footprint: idle CPU and resident memory of the five services, and start-up time of
the CLI.

Starts topology (on a sysfs fixture), allocator, dra-plugin (against the API-server fake of
`dracpu.dev.apiserver`, a process not counted in the pod), nri-plugin (no
runtime: it waits for one, as in a pod whose runtime restarts) and api (loopback), the
simulators off, exactly as `dracpu dev up` would. Prints each service's RSS, PSS and
anonymous (Private_Dirty) memory, from /proc/<pid>/smaps_rollup, once all are ready and again
after 1,000 claims were prepared through the dra-plugin by the kubelet stand-in (and
/v1/devices and /v1/claims read once through the api), and whether the pod's total PSS meets
the target.

Idle CPU: once all are ready (and a --settle pause), each process's user + system time from
/proc/<pid>/stat over --idle seconds in which nothing changes, in millicores (1 = a thousandth
of a CPU), with its thread count. Meanwhile the bench probes the services as the kubelet does
with the chart's defaults (helm/dra-driver-cpu/values.yaml `probes`: /livez of each gRPC
service's probe listener at the liveness period, the api's /healthz and /readyz at theirs), so
the figure includes what the probes cost the pod; the bench's own time is not counted.

PSS is the figure to total: RSS counts every shared page (libpython, gRPC's cygrpc, libcrypto)
in full in every process that maps it, PSS divides it among them. The bench itself loads no
gRPC (readiness is `dracpu health`, the kubelet stand-in runs in a child process that has
exited before memory is read), so no share of the services' pages is charged to it.

Then times every command that talks to no service (`dracpu --help`, `dracpu version`, each
`dracpu` subcommand's --help, each `dracpu-*` service's --help and --version): wall time of a
fresh process, median and p99 over --runs runs each, against the start-up target.

Usage: python benchmarks/footprint_bench.py [--fixture NAME] [--claims N] [--runs N]
                                             [--idle SECONDS] [--settle SECONDS]
                                             [--port PORT] [--base-dir DIR] [--skip-services]
                                             [--skip-cli]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import yaml
from harness.services import wait_serving

from dracpu.core.driver import CPU_CAPACITY, DRIVER_NAME, numa_device_name
from dracpu.dev.apiserver.client import ClusterClient
from dracpu.dev.apiserver.process import FakeProcess
from dracpu.topology.fixtures import write_fixture

BIN = Path(sys.executable).parent
NODE = "bench-node"
SERVICES = ("topology", "allocator", "dra-plugin", "nri-plugin", "api")
CLI_COMMANDS = (
    ("dracpu", "--help"),
    ("dracpu", "version"),
    ("dracpu", "simulate", "--help"),
    ("dracpu", "gatherinfo", "--help"),
    ("dracpu", "introspect", "--help"),
    ("dracpu", "introspect", "metrics"),
    ("dracpu", "health", "--help"),
    ("dracpu", "dev", "--help"),
    ("dracpu", "dev", "up", "--help"),
    ("dracpu", "dev", "claim", "--help"),
    *((f"dracpu-{service}", "--help") for service in SERVICES),
    *((f"dracpu-{service}", "--version") for service in SERVICES),
)
# The targets: the five services idle (simulators off) and a command that talks to no service.
TARGET_PSS_MB = 100.0
TARGET_IDLE_MILLICORES = 2.0
TARGET_CLI_MS = 150.0
CHART_VALUES = Path(__file__).resolve().parent.parent / "helm/dra-driver-cpu/values.yaml"
# The probe listeners' ports of the four gRPC services (the api answers on --port).
PROBE_PORTS = {"topology": 1, "allocator": 2, "dra-plugin": 3, "nri-plugin": 4}


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


MEMORY_KINDS = (
    ("RSS", "Rss", "every page the process maps, shared ones counted in full"),
    ("PSS", "Pss", "shared pages divided among the processes mapping them: the one to total"),
    ("anon", "Private_Dirty", "memory only this process holds (heap, Python objects, stacks)"),
)


def cpu_seconds(pid: int) -> float:
    """User + system time of every thread of the process so far (/proc/<pid>/stat fields 14
    and 15, after the command name, which may hold spaces)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def threads(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[17])


def probe_periods() -> dict[str, float]:
    """The chart's default probe periods: liveness (every container, the api's own) and the
    api's readiness."""
    values = yaml.safe_load(CHART_VALUES.read_text())
    probes, api = values["probes"], (values["api"].get("probes") or {})
    return {
        "liveness": float(probes["liveness"]["periodSeconds"]),
        "api-liveness": float(
            (api.get("liveness") or {}).get("periodSeconds", probes["liveness"]["periodSeconds"])
        ),
        "readiness": float(
            (api.get("readiness") or {}).get("periodSeconds", probes["readiness"]["periodSeconds"])
        ),
    }


async def kubelet_probes(base: str, probe_base: int) -> None:
    """GET each probe at its period, as the kubelet would, until cancelled."""
    periods = probe_periods()
    urls = [(f"{base}/healthz", periods["api-liveness"]), (f"{base}/readyz", periods["readiness"])]
    urls += [
        (f"http://127.0.0.1:{probe_base + offset}/livez", periods["liveness"])
        for offset in PROBE_PORTS.values()
    ]

    async def every(url: str, period: float) -> None:
        while True:
            try:
                await asyncio.to_thread(http_get, url)
            except urllib.error.HTTPError:
                pass  # answered (the api's /readyz says 503 while the nri-plugin has no runtime)
            except OSError as exc:
                print(f"probe {url} failed: {exc}", file=sys.stderr)
            await asyncio.sleep(period)

    async with asyncio.TaskGroup() as group:
        for url, period in urls:
            group.create_task(every(url, period))


async def idle_cpu(
    procs: dict[str, subprocess.Popen[bytes]], seconds: float, base: str, probe_base: int
) -> float:
    """Each process's CPU over `seconds` of idleness with the kubelet's probes running; prints
    one line per service and the total, returns the total in millicores."""
    probes = asyncio.create_task(kubelet_probes(base, probe_base))
    before = {name: cpu_seconds(proc.pid) for name, proc in procs.items()}
    started = time.monotonic()
    await asyncio.sleep(seconds)
    elapsed = time.monotonic() - started
    used = {name: cpu_seconds(proc.pid) - before[name] for name, proc in procs.items()}
    probes.cancel()
    await asyncio.gather(probes, return_exceptions=True)
    millicores = {name: 1000 * value / elapsed for name, value in used.items()}
    parts = "  ".join(f"{name}={value:6.2f}" for name, value in millicores.items())
    total = sum(millicores.values())
    print(f"CPU  millicores idle {elapsed:5.0f} s  {parts}  total={total:6.2f}")
    counts = {name: threads(proc.pid) for name, proc in procs.items()}
    parts = "  ".join(f"{name}={count}" for name, count in counts.items())
    print(f"threads              {parts}  total={sum(counts.values())}")
    return total


def memory_mb(pid: int) -> dict[str, float]:
    """RSS, PSS and Private_Dirty of one process, in MB."""
    values = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        key, _, rest = line.partition(":")
        values[key] = int(rest.split()[0]) / 1024 if rest.strip() else 0.0
    return {kind: values.get(field, 0.0) for kind, field, _ in MEMORY_KINDS}


async def healthy(socket: Path) -> bool:
    """SERVING by `dracpu health` (a child process: the bench maps no gRPC of its own)."""
    if not socket.is_socket():
        return False
    probe = await asyncio.create_subprocess_exec(
        str(BIN / "dracpu"), "health", "--socket", str(socket),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    return await probe.wait() == 0


def http_get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=30) as reply:
        return bytes(reply.read())


async def answers(url: str) -> bool:
    await asyncio.to_thread(http_get, url)  # an OSError until the api answers
    return True


def write_claims(cluster: ClusterClient, count: int, numa_nodes: int) -> list[tuple[str, str, str]]:
    claims = []
    for i in range(count):
        uid, name = str(uuid.uuid4()), f"fp-{i}"
        result = {
            "request": "cpus",
            "driver": DRIVER_NAME,
            "pool": NODE,
            "device": numa_device_name(i % numa_nodes),
            "consumedCapacity": {CPU_CAPACITY: "1"},
        }
        obj = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "bench", "uid": uid},
            "spec": {"devices": {"requests": []}},
            "status": {"allocation": {"devices": {"results": [result]}}},
        }
        cluster.write_claim(obj)
        claims.append(("bench", name, uid))
    return claims


async def prepare_claims(kubelet_root: Path, claims: list[tuple[str, str, str]]) -> None:
    """The kubelet stand-in's part, run in a child process (see `--prepare-claims`)."""
    from dracpu.dev.kubelet_sim import Claim, KubeletSim

    plugin = await KubeletSim(kubelet_root).register(DRIVER_NAME, timeout=30)
    batch = [Claim(*claim) for claim in claims]
    for i in range(0, len(batch), 50):
        answer = await plugin.prepare(batch[i : i + 50])
        failed = [a.error for a in answer.values() if a.error]
        if failed:
            raise SystemExit(f"prepare failed: {failed[0]}")
    await plugin.close()


def print_memory(label: str, procs: dict[str, subprocess.Popen[bytes]]) -> float:
    """One line per kind; returns the total PSS."""
    sizes = {name: memory_mb(proc.pid) for name, proc in procs.items()}
    for kind, _, _ in MEMORY_KINDS:
        parts = "  ".join(f"{name}={size[kind]:5.1f}" for name, size in sizes.items())
        total = sum(size[kind] for size in sizes.values())
        print(f"{kind:<4} MB {label:<20} {parts}  total={total:6.1f}")
    return sum(size["PSS"] for size in sizes.values())


async def services(args: argparse.Namespace) -> None:
    root = Path(tempfile.mkdtemp(prefix="fp", dir=args.base_dir))
    procs: dict[str, subprocess.Popen[bytes]] = {}
    log_file = root / "services.log"
    log = log_file.open("wb")
    apiserver = FakeProcess(root / "apiserver")
    try:
        sysfs = write_fixture(args.fixture, root / "sys")
        config = root / "config.yaml"
        config.write_text(yaml.safe_dump({"hostnameOverride": NODE}))
        cluster = apiserver.start().client()
        sock = {name: root / f"{name}.sock" for name in ("t", "a", "d", "n")}
        common = ["--config", str(config)]
        probe_base = args.port + 10

        def probe(name: str) -> list[str]:
            return ["--probe-address", f"127.0.0.1:{probe_base + PROBE_PORTS[name]}"]

        def spawn(name: str, argv: list[str]) -> subprocess.Popen[bytes]:
            procs[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
            return procs[name]

        topology = spawn("topology", [
            str(BIN / "dracpu-topology"), "--socket", str(sock["t"]),
            "--sysfs-root", str(sysfs), *probe("topology"), *common])  # fmt: skip
        await wait_serving(sock["t"], topology, what="topology", log=log_file, timeout=60,
                           probe=functools.partial(healthy, sock["t"]))  # fmt: skip
        allocator = spawn("allocator", [
            str(BIN / "dracpu-allocator"), "--socket", str(sock["a"]),
            "--topology-socket", str(sock["t"]), "--state-dir", str(root / "state"),
            "--cdi-dir", str(root / "cdi"), *probe("allocator"), *common])  # fmt: skip
        await wait_serving(sock["a"], allocator, what="allocator", log=log_file, timeout=60,
                           probe=functools.partial(healthy, sock["a"]))  # fmt: skip
        plugin = spawn("dra-plugin", [
            str(BIN / "dracpu-dra-plugin"), "--socket", str(sock["d"]),
            "--allocator-socket", str(sock["a"]), "--kubelet-root-dir", str(root / "k"),
            "--kubeconfig", str(apiserver.kubeconfig), "--cdi-dir", str(root / "cdi"),
            *probe("dra-plugin"),
            *common])  # fmt: skip
        await wait_serving(sock["d"], plugin, what="dra-plugin", log=log_file, timeout=60,
                           probe=functools.partial(healthy, sock["d"]))  # fmt: skip
        nri = spawn("nri-plugin", [
            str(BIN / "dracpu-nri-plugin"), "--socket", str(sock["n"]),
            "--allocator-socket", str(sock["a"]), "--nri-socket", str(root / "nri.sock"),
            *probe("nri-plugin"), *common])  # fmt: skip
        base = f"http://127.0.0.1:{args.port}"
        api = spawn("api", [
            str(BIN / "dracpu-api"), "--bind-address", f"127.0.0.1:{args.port}",
            "--topology-socket", str(sock["t"]), "--allocator-socket", str(sock["a"]),
            "--dra-plugin-socket", str(sock["d"]), "--nri-plugin-socket", str(sock["n"]),
            *common])  # fmt: skip
        # No runtime: the nri-plugin listens, and waits for one.
        await wait_serving(sock["n"], nri, what="nri-plugin", log=log_file, timeout=60,
                           probe=sock["n"].is_socket)  # fmt: skip
        await wait_serving(f"{base}/v1/health", api, what="api", log=log_file, timeout=60,
                           probe=functools.partial(answers, f"{base}/v1/health"),
                           interval=0.1)  # fmt: skip
        print(f"fixture={args.fixture} claims={args.claims}")
        for kind, _, meaning in MEMORY_KINDS:
            print(f"# {kind}: {meaning}")
        idle = print_memory("after start", procs)
        verdict = "met" if idle <= TARGET_PSS_MB else "NOT met"
        print(
            f"TARGET idle PSS total <= {TARGET_PSS_MB:g} MB (simulators off): {verdict} "
            f"({idle:.1f} MB)"
        )
        if args.idle:
            await asyncio.sleep(args.settle)
            cpu = await idle_cpu(procs, args.idle, base, probe_base)
            verdict = "met" if cpu <= TARGET_IDLE_MILLICORES else "NOT met"
            print(
                f"TARGET idle CPU total <= {TARGET_IDLE_MILLICORES:g} millicores: {verdict} "
                f"({cpu:.2f})"
            )
            print_memory(f"after {args.idle:g} s idle", procs)
        if not args.claims:
            return

        numa = len(list((sysfs / "devices/system/node").glob("node[0-9]*")))
        claims = write_claims(cluster, args.claims, numa)
        claim_list = root / "claims.json"
        claim_list.write_text(json.dumps(claims))
        stand_in = await asyncio.create_subprocess_exec(
            sys.executable, __file__, "--prepare-claims", str(root / "k"), str(claim_list)
        )
        if await stand_in.wait() != 0:
            raise SystemExit("the kubelet stand-in failed")
        for path in ("/v1/devices", "/v1/claims", "/v1/shared-pool", "/metrics"):
            await asyncio.to_thread(http_get, base + path)
        print_memory(f"after {args.claims} claims", procs)
    finally:
        for proc in procs.values():
            proc.send_signal(signal.SIGTERM)
        for proc in procs.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        apiserver.stop()
        log.close()
        shutil.rmtree(root, ignore_errors=True)


def cli(args: argparse.Namespace) -> None:
    """Wall time and CPU time (user + system) of each command in a fresh process; the bare
    interpreter first, as the floor. CPU time is what the command costs on a busy node."""
    commands = [(sys.executable, "-c", "pass"), *CLI_COMMANDS]
    slowest = (0.0, "")
    for command in commands:
        argv = [command[0] if "/" in command[0] else str(BIN / command[0]), *command[1:]]
        wall, cpu = [], []
        for _ in range(args.runs):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
            wall.append((time.perf_counter() - start) * 1000)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            used = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            cpu.append(used * 1000)
        label = "python -c pass" if command[0] == sys.executable else " ".join(command)
        print(
            f"CLI {label:<30} n={len(wall):<4} wall p50={statistics.median(wall):6.1f} "
            f"p99={percentile(wall, 0.99):6.1f} ms  cpu p50={statistics.median(cpu):6.1f} "
            f"p99={percentile(cpu, 0.99):6.1f} ms"
        )
        if command[0] != sys.executable:
            slowest = max(slowest, (statistics.median(wall), label))
    verdict = "met" if slowest[0] < TARGET_CLI_MS else "NOT met"
    print(
        f"TARGET every command above starts in < {TARGET_CLI_MS:g} ms (wall p50): {verdict} "
        f"(slowest: {slowest[1]} {slowest[0]:.1f} ms)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fixture", default="big-1024")
    parser.add_argument("--claims", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--idle", type=float, default=120.0, help="seconds of idle CPU (0: none)")
    parser.add_argument("--settle", type=float, default=10.0, help="seconds before measuring")
    parser.add_argument("--port", type=int, default=22080)
    parser.add_argument("--base-dir", default="/tmp")
    parser.add_argument("--skip-services", action="store_true")
    parser.add_argument("--skip-cli", action="store_true")
    # Internal: the kubelet stand-in's child process (KUBELET_ROOT CLAIMS_JSON).
    parser.add_argument("--prepare-claims", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.prepare_claims:
        kubelet_root, claim_list = args.prepare_claims
        asyncio.run(prepare_claims(Path(kubelet_root), json.loads(Path(claim_list).read_text())))
        return
    if not args.skip_services:
        asyncio.run(services(args))
    if not args.skip_cli:
        cli(args)


if __name__ == "__main__":
    main()
