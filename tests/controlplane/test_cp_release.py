"""The control plane under test is the Kubernetes release the run names (DRACPU_KUBE_VERSION,
default the newest of tools/kubernetes-versions), as its components report themselves, with
the gate the grouped modes need on (given where it is off by default)."""

from __future__ import annotations

import json
import re

import pytest
from harness.control_plane import KUBE_VERSION, RELEASE, ControlPlane
from harness.waits import wait_for

pytestmark = [pytest.mark.controlplane, pytest.mark.compat, pytest.mark.timeout(300)]


def enabled_features(metrics: str) -> dict[str, bool]:
    """kubernetes_feature_enabled{name="X",stage="..."} 1 lines of a component's /metrics."""
    found = re.finditer(r'^kubernetes_feature_enabled\{name="(\w+)",[^}]*\} (\d)', metrics, re.M)
    return {m[1]: m[2] == "1" for m in found}


def test_the_api_server_and_the_scheduler_are_the_release_under_test(
    control_plane: ControlPlane,
) -> None:
    assert json.loads(control_plane.raw("/version"))["gitVersion"] == KUBE_VERSION
    started = f'"Starting Kubernetes Scheduler" version="{KUBE_VERSION}"'
    wait_for(
        lambda: started in control_plane.log("scheduler").read_text(encoding="utf-8"),
        f"the scheduler's log to name {KUBE_VERSION}",
        timeout=30,
        interval=0.2,
    )


def test_the_api_server_runs_with_the_gates_the_release_needs(
    control_plane: ControlPlane,
) -> None:
    features = enabled_features(control_plane.raw("/metrics"))
    wanted = dict(g.split("=") for g in RELEASE.gates.split(",") if g)
    assert {name: features.get(name) for name in wanted} == {
        name: value == "true" for name, value in wanted.items()
    }
    assert features["DRAConsumableCapacity"]
