"""The pod's footprint: resident memory of the five services, and start-up time of the CLI.

Starts topology (on a sysfs fixture), allocator, dra-plugin (against the API-server fake of
`dracpu.dev.apiserver`, a process not counted in the pod), nri-plugin (no
runtime: it waits for one, as in a pod whose runtime restarts) and api (loopback), the
simulators off, exactly as `dracpu dev up` would. Prints each service's RSS, PSS and
anonymous (Private_Dirty) memory, from /proc/<pid>/smaps_rollup, once all are ready and again
after 1,000 claims were prepared through the dra-plugin by the kubelet stand-in (and
/v1/devices and /v1/claims read once through the api), and whether the pod's total PSS meets
the target.

PSS is the figure to total: RSS counts every shared page (libpython, gRPC's cygrpc, libcrypto)
in full in every process that maps it, PSS divides it among them. The bench itself loads no
gRPC (readiness is `dracpu health`, the kubelet stand-in runs in a child process that has
exited before memory is read), so no share of the services' pages is charged to it.

Then times every command that talks to no service (`dracpu --help`, `dracpu version`, each
`dracpu` subcommand's --help, each `dracpu-*` service's --help and --version): wall time of a
fresh process, median and p99 over --runs runs each, against the start-up target.

Usage: python benchmarks/footprint_bench.py [--fixture NAME] [--claims N] [--runs N]
                                             [--port PORT] [--base-dir DIR] [--skip-services]
                                             [--skip-cli]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
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
TARGET_PSS_MB = 150.0
TARGET_CLI_MS = 150.0


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


MEMORY_KINDS = (
    ("RSS", "Rss", "every page the process maps, shared ones counted in full"),
    ("PSS", "Pss", "shared pages divided among the processes mapping them: the one to total"),
    ("anon", "Private_Dirty", "memory only this process holds (heap, Python objects, stacks)"),
)


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

        def spawn(name: str, argv: list[str]) -> subprocess.Popen[bytes]:
            procs[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
            return procs[name]

        topology = spawn("topology", [
            str(BIN / "dracpu-topology"), "--socket", str(sock["t"]),
            "--sysfs-root", str(sysfs), *common])  # fmt: skip
        await wait_serving(sock["t"], topology, what="topology", log=log_file, timeout=60,
                           probe=functools.partial(healthy, sock["t"]))  # fmt: skip
        allocator = spawn("allocator", [
            str(BIN / "dracpu-allocator"), "--socket", str(sock["a"]),
            "--topology-socket", str(sock["t"]), "--state-dir", str(root / "state"),
            "--cdi-dir", str(root / "cdi"), *common])  # fmt: skip
        await wait_serving(sock["a"], allocator, what="allocator", log=log_file, timeout=60,
                           probe=functools.partial(healthy, sock["a"]))  # fmt: skip
        plugin = spawn("dra-plugin", [
            str(BIN / "dracpu-dra-plugin"), "--socket", str(sock["d"]),
            "--allocator-socket", str(sock["a"]), "--kubelet-root-dir", str(root / "k"),
            "--kubeconfig", str(apiserver.kubeconfig), "--cdi-dir", str(root / "cdi"),
            *common])  # fmt: skip
        await wait_serving(sock["d"], plugin, what="dra-plugin", log=log_file, timeout=60,
                           probe=functools.partial(healthy, sock["d"]))  # fmt: skip
        nri = spawn("nri-plugin", [
            str(BIN / "dracpu-nri-plugin"), "--socket", str(sock["n"]),
            "--allocator-socket", str(sock["a"]), "--nri-socket", str(root / "nri.sock"),
            *common])  # fmt: skip
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
