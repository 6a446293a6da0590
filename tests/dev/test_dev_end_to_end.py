"""`dracpu dev` end to end on a fixture, with the real services as processes: claims made and
released through the simulated scheduler, kubelet and runtime are visible in the api and the
CDI folder; a SIGKILLed service comes back with nothing lost; Ctrl-C leaves nothing behind."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from harness.waits import wait_for

from dracpu.core.cpuset import CPUSet
from dracpu.dev.apiserver.client import ClusterClient
from dracpu.dev.layout import RunLayout

FIXTURE = "xeon-2s-ht"  # 2 sockets x 10 cores x 2 threads, one NUMA node per socket


def dracpu(*args: str) -> list[str]:
    return [sys.executable, "-m", "dracpu.core.cli", *args]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def fields(line: str) -> dict[str, str]:
    return dict(word.split("=", 1) for word in line.split() if "=" in word)


@dataclass
class Run:
    root: Path
    url: str
    process: subprocess.Popen[bytes]
    output: Path

    def dev(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            dracpu("dev", *args, "--run-dir", str(self.root)),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def claim(self, *args: str) -> dict[str, str]:
        result = self.dev("claim", *args)
        assert result.returncode == 0, result.stderr
        return fields(result.stdout)

    def claim_names(self) -> list[str]:
        """The ResourceClaims in the run's API-server fake, as namespace/name."""
        with contextlib.closing(ClusterClient(RunLayout.at(self.root).apiserver_kubeconfig)) as api:
            return sorted(f"{c['metadata']['namespace']}/{c['metadata']['name']}"
                          for c in api.claims())  # fmt: skip

    def status(self) -> dict[str, Any]:
        document: dict[str, Any] = json.loads((self.root / "dev-up.json").read_text())
        return document

    def get(self, path: str) -> Any:
        reply = httpx.get(self.url + path, timeout=10)
        assert reply.status_code == 200, reply.text
        return reply.json()

    def poll(self, path: str) -> Any:
        """The answer, or None while the api reports a backend as unavailable."""
        reply = httpx.get(self.url + path, timeout=10)
        return reply.json() if reply.status_code == 200 else None

    def log(self) -> str:
        return self.output.read_text()


@contextlib.contextmanager
def dev_up(fixture: str, config: str | None = None) -> Iterator[Run]:
    """`dracpu dev up` as a subprocess on a fresh run folder and a free port, until ready;
    Ctrl-C'd afterwards if the test did not stop it."""
    root = Path(tempfile.mkdtemp(dir="/tmp", prefix="dde-"))
    port = free_port()
    output = root.parent / f"{root.name}.out"
    extra = []
    if config is not None:
        (root / "config.yaml").write_text(config)
        extra = ["--config", str(root / "config.yaml")]
    with output.open("wb") as sink:
        process = subprocess.Popen(
            dracpu(
                "dev",
                "up",
                "--run-dir",
                str(root),
                "--fixture",
                fixture,
                "--api-address",
                f"127.0.0.1:{port}",
                *extra,
            ),
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    started = Run(root, f"http://127.0.0.1:{port}", process, output)
    try:
        wait_for(
            lambda: "ready: api" in started.log() or process.poll() is not None,
            "dev up ready",
            timeout=60,
        )
        assert process.poll() is None, started.log()
        yield started
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
        shutil.rmtree(root, ignore_errors=True)
        output.unlink(missing_ok=True)


@pytest.fixture
def run() -> Iterator[Run]:
    with dev_up(FIXTURE) as started:
        yield started


def cdi_env(run: Run, uid: str) -> list[str]:
    spec = json.loads((run.root / "cdi" / f"dra.k8s.io-cpu_claim-{uid}.json").read_text())
    return [env for device in spec["devices"] for env in device["containerEdits"]["env"]]


def test_claims_restart_and_clean_stop(run: Run) -> None:
    first = run.claim("--cpus", "2")
    second = run.claim("--cpus", "4", "--numa", "1", "--name", "numa-one")
    assert first["claim"] == "default/cpus-1"
    assert second["claim"] == "default/numa-one"
    assert second["devices"] == "cpudevnuma001"
    cpus = {claim["uid"]: CPUSet.parse(claim["cpuset"]) for claim in (first, second)}
    assert [len(cpus[first["uid"]]), len(cpus[second["uid"]])] == [2, 4]
    assert not cpus[first["uid"]] & cpus[second["uid"]]
    for claim in (first, second):
        # The container runs on exactly the claim's CPUs, pinned through NRI.
        assert claim["cpus"] == claim["cpuset"]
        assert cdi_env(run, claim["uid"]) == [f"DRA_CPUSET_{claim['uid']}={claim['cpuset']}"]

    served = {c["uid"]: c for c in run.get("/v1/claims")["claims"]}
    assert set(served) == set(cpus)
    assert {uid: CPUSet.parse(c["cpus"]) for uid, c in served.items()} == cpus
    assert served[second["uid"]]["owner"]["container_id"] == second["container"]
    shared = CPUSet.parse(run.get("/v1/shared-pool")["cpus"])
    assert not shared & (cpus[first["uid"]] | cpus[second["uid"]])

    released = run.dev("release", "cpus-1")
    assert released.returncode == 0, released.stderr
    assert [c["uid"] for c in run.get("/v1/claims")["claims"]] == [second["uid"]]
    assert not (run.root / "cdi" / f"dra.k8s.io-cpu_claim-{first['uid']}.json").exists()
    fake = ClusterClient(RunLayout.at(run.root).apiserver_kubeconfig)
    try:
        assert not fake.claim_exists("default", "cpus-1")
        # The plugin's status entry is on the claim it still holds.
        entries = wait_for(
            lambda: fake.read_claim("default", "numa-one")["status"].get("devices"),
            "the claim's status.devices entry",
        )
        assert [e["data"]["cpuset"] for e in entries] == [second["cpuset"]]
    finally:
        fake.close()
    assert cpus[first["uid"]].issubset(CPUSet.parse(run.get("/v1/shared-pool")["cpus"]))

    # SIGKILL the allocator, the one writer of allocation state: it is restarted, and it
    # comes back with the remaining claim on the same CPUs.
    before = run.status()["services"]["allocator"]["pid"]
    os.kill(before, signal.SIGKILL)
    wait_for(
        lambda: run.status()["services"]["allocator"]["restarts"] == 1,
        "allocator restart",
        timeout=60,
    )
    after = run.status()["services"]["allocator"]["pid"]
    assert after != before and alive(after)
    assert f"allocator (pid {before}) stopped: killed by SIGKILL" in run.log()
    # The api reconnects to the new allocator on its own.
    answer = wait_for(
        lambda: run.poll("/v1/claims"), "the api answering from the new allocator", timeout=60
    )
    served = {c["uid"]: c for c in answer["claims"]}
    assert list(served) == [second["uid"]]
    assert CPUSet.parse(served[second["uid"]]["cpus"]) == cpus[second["uid"]]

    # SIGKILL the dra-plugin: it comes back, the kubelet simulator registers it again, and
    # the next claim goes through the new process.
    plugin = run.status()["services"]["dra-plugin"]["pid"]
    os.kill(plugin, signal.SIGKILL)
    wait_for(
        lambda: run.status()["services"]["dra-plugin"]["restarts"] == 1,
        "dra-plugin restart",
        timeout=60,
    )
    third = run.claim("--cpus", "2")
    assert not CPUSet.parse(third["cpuset"]) & cpus[second["uid"]]
    assert third["uid"] in {c["uid"] for c in run.get("/v1/claims")["claims"]}

    def listed() -> dict[str, dict[str, str]] | None:
        answer = run.poll("/v1/containers")
        return None if answer is None else {c["container_id"]: c for c in answer["containers"]}

    # The plugin records a container it pinned as "created" (CreateContainer comes before the
    # start) and keeps its last known containers while disconnected; only a Synchronize from
    # the restarted runtime reports the container "running". That state marks the resync.
    assert (listed() or {})[second["container"]]["state"] == "created"

    # SIGKILL the runtime simulator: like a real runtime it keeps its containers, and the
    # nri-plugin, reconnected, sees them again with the same CPUs.
    runtime = run.status()["services"]["runtime-sim"]["pid"]
    os.kill(runtime, signal.SIGKILL)
    wait_for(
        lambda: run.status()["services"]["runtime-sim"]["restarts"] == 1,
        "runtime-sim restart",
        timeout=60,
    )

    def resynchronized() -> dict[str, str] | None:
        entry = (listed() or {}).get(second["container"])
        return entry if entry is not None and entry["state"] == "running" else None

    seen = wait_for(
        resynchronized, "containers seen again by the reconnected nri-plugin", timeout=60
    )
    assert CPUSet.parse(seen["cpus"]) == cpus[second["uid"]]
    released = run.dev("release", "numa-one")
    assert released.returncode == 0, released.stderr

    # A runtime delivers StopContainer/RemoveContainer only to the plugins connected at that
    # moment; one that is not (reconnecting, or dropped for missing a request deadline) learns
    # of the removal from its next Synchronize. The plugin's view is eventually consistent
    # with the runtime, so wait for the removal to show rather than expect it at once.
    def released_gone() -> bool:
        now = listed()
        return now is not None and second["container"] not in now

    wait_for(released_gone, "released container gone from the nri-plugin's view", timeout=60)

    pids = [entry["pid"] for entry in run.status()["services"].values()]
    run.process.send_signal(signal.SIGINT)
    assert run.process.wait(60) == 0, run.log()
    assert "dracpu dev: stopped" in run.log()
    assert [pid for pid in pids if alive(pid)] == []
    assert [p for p in run.root.rglob("*") if p.is_socket()] == []
    assert not (run.root / "dev-up.json").exists()


def test_a_second_dev_up_on_the_same_run_dir_is_refused(run: Run) -> None:
    result = subprocess.run(
        dracpu("dev", "up", "--run-dir", str(run.root), "--api-address", "127.0.0.1:1"),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"dracpu dev: error: run dir {run.root} is in use by another dracpu dev up "
        f"(pid {run.process.pid})"
    )
    unknown = run.dev("release", "no-such-claim")
    assert (unknown.returncode, unknown.stderr) == (
        2,
        "dracpu dev: error: claim default/no-such-claim not found\n",
    )
    status = run.dev("status", "--json")
    assert status.returncode == 0
    assert all(entry["ready"] for entry in json.loads(status.stdout)["services"].values())


def test_individual_mode_hands_out_cpu_devices() -> None:
    with dev_up("single-4c8t", "cpuDeviceMode: individual\n") as run:
        first = run.claim("--cpus", "3")
        assert len(first["devices"].split(",")) == 3
        assert len(CPUSet.parse(first["cpuset"])) == 3
        assert first["cpus"] == first["cpuset"]
        too_many = run.dev("claim", "--cpus", "6")
        assert too_many.returncode == 1
        # 8 CPUs, one kept for the shared pool, 3 claimed.
        assert too_many.stderr == "dracpu dev: 6 CPUs requested, 4 CPU devices are free\n"
        assert [c["uid"] for c in run.get("/v1/claims")["claims"]] == [first["uid"]]
        assert run.claim_names() == ["default/cpus-1"]


def test_machine_mode_takes_the_cpuset_from_the_claim_and_rolls_back_a_refusal() -> None:
    with dev_up("single-4c8t", "groupBy: machine\nallocator: external\n") as run:
        missing = run.dev("claim", "--cpus", "2")
        assert missing.returncode == 2
        assert "pass --cpuset with the exact CPUs" in missing.stderr
        first = run.claim("--cpus", "2", "--cpuset", "1,5")
        assert (first["devices"], first["cpuset"], first["cpus"]) == ("cpudevmachine", "1,5", "1,5")
        taken = run.dev("claim", "--cpus", "1", "--cpuset", "5", "--name", "taken")
        assert taken.returncode == 2
        assert taken.stderr.count("\n") == 1 and "NodePrepareResources" in taken.stderr
        # The refused claim was undone: no ResourceClaim, no allocation, no CDI spec.
        assert run.claim_names() == ["default/cpus-1"]
        assert [c["uid"] for c in run.get("/v1/claims")["claims"]] == [first["uid"]]
        assert [p.name for p in (run.root / "cdi").glob("dra.k8s.io-cpu_*")] == [
            f"dra.k8s.io-cpu_claim-{first['uid']}.json"
        ]


def test_numa_grouping_with_the_external_allocator_takes_the_claims_cpuset() -> None:
    with dev_up("xeon-2s-ht", "groupBy: numanode\nallocator: external\n") as run:
        missing = run.dev("claim", "--cpus", "2")
        assert missing.returncode == 2
        assert "the node's allocator is external: pass --cpuset" in missing.stderr
        # CPUs of NUMA node 1: the claim lands on its device, on exactly those CPUs.
        first = run.claim("--cpus", "2", "--cpuset", "12,32")
        assert (first["devices"], first["cpuset"], first["cpus"]) == (
            "cpudevnuma001",
            "12,32",
            "12,32",
        )
        astray = run.dev("claim", "--cpus", "2", "--cpuset", "9-10", "--name", "astray")
        assert astray.returncode == 2
        assert "--cpuset 9-10: no device offers all of these CPUs" in astray.stderr
