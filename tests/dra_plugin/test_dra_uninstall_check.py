"""`dracpu uninstall-check`, the chart's pre-delete hook: it refuses (exit 1, one line naming
each pod and its claim) while a running pod holds a claim allocated by this driver, lets the
uninstall go on (exit 0) otherwise, and says in one line (exit 2) when the API server cannot
be asked."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dracpu.dev.apiserver import fake_apiserver
from dracpu.dra_plugin.uninstall_check import ClaimedPod, claimed_pods

pytestmark = pytest.mark.timeout(120)

DRACPU = str(Path(sys.executable).parent / "dracpu")


def claim(name: str, driver: str | None, *pods: tuple[str, str]) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if driver is not None:
        status["allocation"] = {
            "devices": {
                "results": [
                    {"driver": driver, "pool": "n1", "device": "cpudev001", "request": "cpus"}
                ]
            }
        }
    if pods:
        status["reservedFor"] = [{"resource": "pods", "name": n, "uid": u} for n, u in pods]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"devices": {"requests": []}},
        "status": status,
    }


def pod(name: str, uid: str, phase: str = "Running") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": uid},
        "spec": {"nodeName": "n1"},
        "status": {"phase": phase},
    }


WEB = ClaimedPod("default", "web", "web-cpus", "n1")


@pytest.mark.parametrize(
    ("claims", "pods", "held"),
    [
        pytest.param([claim("web-cpus", "dra.cpu", ("web", "u1"))], [pod("web", "u1")], [WEB],
                     id="running-pod-holds-a-claim"),
        pytest.param([claim("web-cpus", "dra.cpu", ("web", "u1"))],
                     [pod("web", "u1", "Pending")], [WEB], id="pending-pod-already-reserved"),
        pytest.param([claim("gpu", "gpu.example.com", ("web", "u1"))], [pod("web", "u1")], [],
                     id="another-drivers-claim"),
        pytest.param([claim("web-cpus", None)], [], [], id="claim-not-allocated"),
        pytest.param([claim("web-cpus", "dra.cpu", ("web", "u1"))], [], [],
                     id="reserved-pod-gone"),
        pytest.param([claim("web-cpus", "dra.cpu", ("web", "u1"))],
                     [pod("web", "u1", "Succeeded")], [], id="reserved-pod-finished"),
        pytest.param([claim("web-cpus", "dra.cpu", ("web", "u1"))], [pod("web", "u2")], [],
                     id="same-name-other-pod"),
    ],
)  # fmt: skip
def test_which_pods_hold_the_drivers_claims(
    claims: list[dict[str, Any]], pods: list[dict[str, Any]], held: list[ClaimedPod]
) -> None:
    assert claimed_pods(claims, pods, "dra.cpu") == held


def _run(kubeconfig: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [DRACPU, "uninstall-check", "--kubeconfig", str(kubeconfig)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_it_refuses_naming_the_pods_then_lets_the_uninstall_go_on(tmp_path: Path) -> None:
    with fake_apiserver(tmp_path) as (store, kubeconfig):
        with store.lock:
            for c in (claim("web-cpus", "dra.cpu", ("web", "u1")), claim("idle", "dra.cpu")):
                store.claims[("default", c["metadata"]["name"])] = c
            store.pods["u1"] = pod("web", "u1")
        refused = _run(kubeconfig)
        assert refused.returncode == 1, refused.stderr
        (line,) = refused.stdout.splitlines()
        assert "refusing to uninstall: 1 running pod(s) hold dra.cpu claims" in line
        assert "default/web (claim web-cpus on n1)" in line
        assert "helm uninstall --no-hooks" in line
        with store.lock:
            store.pods["u1"]["status"]["phase"] = "Succeeded"
        done = _run(kubeconfig)
        assert done.returncode == 0, done.stderr
        assert "no running pod holds a dra.cpu claim" in done.stdout


def test_an_unreachable_server_is_one_line_and_exit_2(tmp_path: Path) -> None:
    with fake_apiserver(tmp_path) as (_, kubeconfig):
        pass  # the server is gone; its kubeconfig remains
    done = _run(kubeconfig)
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert line.startswith("dracpu uninstall-check: error: list resourceclaims: ")
    assert "Traceback" not in done.stderr
