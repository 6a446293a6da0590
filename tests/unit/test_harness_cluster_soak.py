"""The soak's fault loop (bignode.cluster_soak) with a guest answered by hand: the judge hears of
a fault before the fault is made, so a sample read while it is under way judges what it did (a
container gone, a pod not ready) by the new fault's bound and counts nothing; a fault that could
not be made leaves the bound where it was."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from bignode import cluster_soak
from bignode.cluster_soak import Soak
from harness.guest import GuestError
from harness.kernel_judge import ApiView, Seen

from dracpu.core.cpuset import CPUSet

BOUND = 60.0


class Guest:
    def __init__(self, state: Path, fault: Callable[[str], dict[str, Any]]) -> None:
        self.state = state
        self.fault = fault

    def call(self, fn: str, timeout: float = 600.0, **kwargs: Any) -> Any:
        if fn == "kernel":
            return {"node_cpus": {"0": "0-3", "1": "4-7"}}
        assert fn == "cluster_fault", fn
        return self.fault(kwargs["kind"])

    def check(self) -> None:
        pass


class Cluster:
    def __init__(self, guest: Guest) -> None:
        self.guest = guest


def soak_on(state: Path, fault: Callable[[str], dict[str, Any]]) -> Soak:
    cluster: Any = Cluster(Guest(state, fault))
    return Soak(cluster, 1, report=lambda line: None, bound=BOUND)


def driver_pod(created: float) -> dict[str, Any]:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(created))
    return {
        "kind": "Pod",
        "metadata": {
            "name": "driver",
            "namespace": "kube-system",
            "uid": "pod-driver",
            "creationTimestamp": stamp,
        },
        "spec": {"containers": [{"name": "allocator"}, {"name": "api"}]},
        "status": {"phase": "Running"},
    }


def api_only() -> list[Seen]:
    return [Seen("kube-system", "driver", "api", 100, CPUSet.parse("0-7"), CPUSet.parse("0-7"))]


@pytest.fixture
def no_apiserver_faults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster_soak, "FAULTS", cluster_soak.SERVICE_FAULTS)


@pytest.mark.usefixtures("no_apiserver_faults")
def test_a_sample_read_during_a_fault_judges_it_by_that_faults_bound(tmp_path: Path) -> None:
    long_ago = time.time() - 10 * BOUND
    soak: Soak

    def kill_the_allocator(kind: str) -> dict[str, Any]:
        # The sampler reads while the call that killed the allocator has not answered yet.
        view = ApiView.from_list([driver_pod(long_ago)])
        soak.judge.sample(view, api_only(), time.time())
        return {"done": True, "what": f"{kind} 0123456789ab"}

    soak = soak_on(tmp_path, kill_the_allocator)
    soak.judge.fault(long_ago)
    soak._fault()
    assert sum(soak.tally.faults.values()) == 1
    assert soak.judge.unsettled == ["kube-system/driver: Running, not running ['allocator']"]
    assert soak.judge.counts.offences() == []


@pytest.mark.usefixtures("no_apiserver_faults")
def test_a_fault_that_could_not_be_made_leaves_the_bound_where_it_was(tmp_path: Path) -> None:
    def runtime_restarting(kind: str) -> dict[str, Any]:
        raise GuestError(f"in the guest, cluster_fault: crictl ps failed ({kind})")

    soak = soak_on(tmp_path, runtime_restarting)
    soak.judge.fault(1_800_000_000.0)
    soak._fault()
    assert sum(soak.tally.faults.values()) == 0
    assert soak.judge.last_fault == 1_800_000_000.0
