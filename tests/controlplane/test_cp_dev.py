"""`dracpu dev up --kubeconfig`: the local run publishes to the real API server (no cluster
folder), the real scheduler allocates, and `dracpu dev prepare` has the kubelet simulator
prepare the claim it reads from the server; `dev claim` is refused in such a run."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from controlplane.checks import (
    DEVICE_CLASS,
    NAMESPACE,
    allocation,
    claim,
    complete,
    pod,
    slices,
)
from harness.control_plane import ControlPlane
from harness.waits import wait_for

pytestmark = [pytest.mark.controlplane, pytest.mark.timeout(600)]
NODE = "dev-up-node"


def dracpu(*args: str) -> list[str]:
    return [sys.executable, "-m", "dracpu.core.cli", *args]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture
def run_dir(control_plane: ControlPlane) -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="cpdev", dir="/tmp"))
    control_plane.apply(DEVICE_CLASS)
    control_plane.register_node(NODE)
    config = root / "config.yaml"
    config.write_text(yaml.safe_dump({"apiVersion": "v1alpha1", "hostnameOverride": NODE}))
    log = (root / "up.log").open("wb")
    up = subprocess.Popen(
        dracpu("dev", "up", "--run-dir", str(root / "run"), "--fixture", "xeon-2s-ht",
               "--config", str(config), "--kubeconfig", str(control_plane.kubeconfig),
               "--api-address", f"127.0.0.1:{free_port()}", "--ready-timeout", "90"),
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        wait_for(
            lambda: "ready: api" in (root / "up.log").read_text(),
            "dev up ready",
            timeout=180,
            interval=0.2,
        )
        yield root / "run"
    finally:
        up.send_signal(signal.SIGINT)
        try:
            up.wait(timeout=60)
        except subprocess.TimeoutExpired:
            up.kill()
            up.wait()
        log.close()
        shutil.rmtree(root, ignore_errors=True)


def test_dev_up_publishes_to_the_api_server_and_prepares_its_claims(
    control_plane: ControlPlane, run_dir: Path
) -> None:
    cp = control_plane
    wait_for(lambda: complete(slices(cp, NODE), 2), "slices of dev up", timeout=60, interval=0.2)
    assert not list((run_dir / "cluster" / "resourceslices").glob("*.yaml"))
    cp.create(claim("dev-cpus-2", {"allocationMode": "ExactCount", "count": 1,
                                   "capacity": {"requests": {"dra.cpu/cpu": "2"}}}),
              pod("dev-pod", "dev-cpus-2", NODE))  # fmt: skip
    wait_for(lambda: allocation(cp, "dev-cpus-2"), "allocation", timeout=60, interval=0.2)
    uid = cp.get("resourceclaim", "dev-cpus-2", NAMESPACE)["metadata"]["uid"]

    done = subprocess.run(dracpu("dev", "prepare", "--run-dir", str(run_dir), "dev-cpus-2"),
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"prepared claim=default/dev-cpus-2 uid={uid} cdi=")
    assert (run_dir / "cdi" / f"dra.k8s.io-cpu_claim-{uid}.json").exists()

    refused = subprocess.run(dracpu("dev", "claim", "--run-dir", str(run_dir), "--cpus", "2"),
                             capture_output=True, text=True, timeout=120)  # fmt: skip
    assert refused.returncode == 2
    assert "uses the API server of" in refused.stderr and refused.stderr.count("\n") == 1

    done = subprocess.run(dracpu("dev", "unprepare", "--run-dir", str(run_dir), "dev-cpus-2"),
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert not (run_dir / "cdi" / f"dra.k8s.io-cpu_claim-{uid}.json").exists()
