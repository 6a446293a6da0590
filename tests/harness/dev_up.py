"""`dracpu dev up --no-runtime-sim` as a process next to a real containerd (ContainerdNode).

The services run on the real machine's sysfs with the simulated kubelet; the runtime end of
the NRI socket is the real containerd. `claim()` prepares a claim through the simulated kubelet
and returns the CDI device ids the kubelet would hand to the runtime for it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.containerd_node import NodeError
from harness.waits import wait_for


@dataclass(frozen=True)
class Claim:
    name: str
    uid: str
    cpuset: str
    cdi_devices: tuple[str, ...]

    @property
    def env_key(self) -> str:
        return f"DRA_CPUSET_{self.uid}"


def free_port(low: int = 0, high: int = 0) -> int:
    """A free loopback port: in [low, high] when given, else one the kernel picks."""
    candidates = range(low, high + 1) if low and high else [0]
    for port in candidates:
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return int(probe.getsockname()[1])
    raise NodeError(f"no free port in {low}-{high}")


def dracpu_bin() -> str:
    local = Path(sys.executable).parent / "dracpu"
    return str(local) if local.exists() else "dracpu"


class DevUp:
    """One `dracpu dev up --no-runtime-sim` on `run_dir` (with `runtime_sim`, the simulated
    runtime instead of a real one); the API on 127.0.0.1:`port`."""

    def __init__(
        self,
        run_dir: Path,
        port: int,
        *,
        verbosity: int = 2,
        extra: tuple[str, ...] = (),
        runtime_sim: bool = False,
    ) -> None:
        self.run_dir = Path(run_dir).absolute()
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.verbosity = verbosity
        self.extra = extra
        self.runtime_sim = runtime_sim
        self.log_file = self.run_dir.parent / f"{self.run_dir.name}-devup.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        log = self.log_file.open("ab")
        self.process = subprocess.Popen(
            [
                dracpu_bin(),
                "dev",
                "up",
                "--run-dir",
                str(self.run_dir),
                *(() if self.runtime_sim else ("--no-runtime-sim",)),
                "--api-address",
                f"127.0.0.1:{self.port}",
                "-v",
                str(self.verbosity),
                *self.extra,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        wait_for(self._ready_line, "dracpu dev up to report ready", timeout=timeout)

    def _ready_line(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            raise NodeError(f"dracpu dev up exited {self.process.returncode}: {self.log_tail()}")
        with contextlib.suppress(OSError):
            return "ready: api" in self.log_file.read_text(errors="replace")
        return False

    def stop(self, timeout: float = 30.0) -> None:
        process = self.process
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        self.process = None

    def log_tail(self, lines: int = 20) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def service_log(self, service: str) -> str:
        with contextlib.suppress(OSError):
            return (self.run_dir / "logs" / f"{service}.log").read_text(errors="replace")
        return ""

    # -- the API ----------------------------------------------------------------------------

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(self.url + path, timeout=10) as reply:
            body = reply.read()
        return json.loads(body) if body[:1] in (b"{", b"[") else body.decode()

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/readyz", timeout=5) as reply:
                return bool(reply.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def wait_ready(self, timeout: float = 60.0) -> None:
        wait_for(self.ready, f"{self.url}/readyz", timeout=timeout)

    def shared_pool(self) -> str:
        return str(self.get("/v1/shared-pool")["cpus"])

    def containers(self) -> list[dict[str, Any]]:
        return list(self.get("/v1/containers")["containers"])

    def pushes_pool_changes(self) -> bool:
        """Whether the nri-plugin pushes shared-pool changes to running containers itself
        (plugin-initiated UpdateContainers), as it decided for the runtime it is connected to.
        When it does not (CRI-O, containerd before 2.4), a change reaches running containers at
        the runtime's next call: a CreateContainer answer or a Synchronize."""
        return bool(self.get("/v1/health")["runtime"]["unsolicited_updates"])

    def wait_plugin_sees_pool(self) -> None:
        """Until the nri-plugin has taken in the allocator's current shared pool."""
        generation = self.get("/v1/shared-pool")["generation"]
        wait_for(
            lambda: self.get("/v1/health")["runtime"]["shared_pool_generation"] >= generation,
            f"the nri-plugin to see shared-pool generation {generation}",
            timeout=30,
            interval=0.5,
        )

    def metrics(self) -> str:
        return str(self.get("/metrics"))

    # -- processes ------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        done = subprocess.run(
            [dracpu_bin(), "dev", "status", "--run-dir", str(self.run_dir), "--json"],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        )
        document: dict[str, Any] = json.loads(done.stdout)
        return document

    def service_pid(self, service: str) -> int:
        return int(self.status()["services"][service]["pid"])

    # -- claims through the simulated kubelet --------------------------------------------

    def _dev(self, *args: str) -> str:
        done = subprocess.run(
            [dracpu_bin(), "dev", *args, "--run-dir", str(self.run_dir)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if done.returncode != 0:
            raise NodeError(f"dracpu dev {args[0]}: {done.stderr.strip()}")
        return done.stdout

    def claim(
        self,
        name: str,
        cpus: int = 1,
        pod_uid: str = "",
        memory_placement: str = "",
        shared_pool: str = "",
    ) -> Claim:
        """`dracpu dev claim`, reserved for the pod with `pod_uid` (as the scheduler reserves a
        claim for the pods that use it; without it, for a pod no container belongs to), with
        the opaque cpuConfig.memoryPlacement and cpuConfig.sharedPool when given."""
        reserve = ("--pod-uid", pod_uid) if pod_uid else ()
        memory = ("--memory-placement", memory_placement) if memory_placement else ()
        pool = ("--shared-pool", shared_pool) if shared_pool else ()
        out = self._dev("claim", "--cpus", str(cpus), "--name", name, *reserve, *memory, *pool)
        fields = dict(part.split("=", 1) for part in out.split() if "=" in part)
        uid, cpuset = fields["uid"], fields["cpuset"]
        return Claim(name, uid, cpuset, self.cdi_devices(uid))

    def release(self, name: str) -> None:
        self._dev("release", name)

    def cdi_devices(self, uid: str) -> tuple[str, ...]:
        """Every CDI device id (`kind=name`) the specs in the run folder define for `uid`."""
        found = []
        for spec_file in sorted((self.run_dir / "cdi").glob("*.json")):
            with contextlib.suppress(OSError, ValueError):
                spec = json.loads(spec_file.read_text())
                for device in spec.get("devices", []):
                    if uid in device.get("name", ""):
                        found.append(f"{spec['kind']}={device['name']}")
        if not found:
            raise NodeError(f"no CDI spec in {self.run_dir / 'cdi'} names claim {uid}")
        return tuple(found)


def elapsed(started: float) -> float:
    return time.monotonic() - started
