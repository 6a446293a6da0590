"""The guest's container sampler (inguest._sample), checked on the host with the kernel's
answers given: what counts as a violation, as off its cpuset, and as on its cpuset."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest
from harness.runtime_tasks import status_field
from harness.waits import wait_for

from dracpu.core.cpuset import CPUSet

HERE = Path(__file__).parent
CLAIMS = {"a": CPUSet.parse("2-3"), "b": CPUSet.parse("4")}


@pytest.fixture
def inguest(monkeypatch: pytest.MonkeyPatch) -> Any:
    # The agent runs inguest as a script's neighbour, with tests/skew on its path.
    monkeypatch.syspath_prepend(str(HERE.parent / "skew"))
    monkeypatch.syspath_prepend(str(HERE))
    # Importing inguest sets the guest's waits: restored after the test.
    monkeypatch.delenv("DRACPU_KUBELET_SIM_PLUGIN_WAIT", raising=False)
    import skew_bench
    import skew_stack

    for name in ("READY_TIMEOUT", "STOP_TIMEOUT", "READY_POLL"):
        monkeypatch.setattr(skew_stack, name, getattr(skew_stack, name))
    monkeypatch.setattr(skew_bench, "SETTLE_TIMEOUT", skew_bench.SETTLE_TIMEOUT)
    import inguest as module

    yield module
    sys.modules.pop("inguest", None)


def sample(inguest: Any, kernel: dict[str, tuple[str, str, str]], record: dict[str, Any]) -> None:
    """One sample of containers whose (Cpus_allowed_list, cpuset.cpus.effective, claimed CPUs)
    the kernel answers as `kernel` says."""
    processes = {cid: (n, f"/kubepods/pod1/{cid}") for n, cid in enumerate(kernel, 1)}
    by_pid = {n: kernel[cid] for cid, (n, _) in processes.items()}
    inguest._container_processes = lambda: processes
    inguest._process_cpus = lambda pid: tuple(CPUSet.parse(c) for c in by_pid[pid])
    inguest._sample(CLAIMS, record)


def fresh() -> dict[str, Any]:
    return {"samples": 0, "containers": {}, "violations": [], "errors": []}


@pytest.mark.parametrize(
    ("allowed", "held", "violation", "off"),
    [
        pytest.param("2-3", "2-3", False, False, id="claimed-on-its-claim"),
        pytest.param("0-7", "2-3", True, True, id="claimed-on-every-cpu"),
        pytest.param("0-3", "2-3", False, True, id="claimed-on-its-claim-and-the-pool"),
        pytest.param("2-4", "2-3", True, True, id="claimed-on-another-claims-cpu"),
        pytest.param("0-1,5-7", "", False, False, id="shared-on-the-pool"),
        pytest.param("0-7", "", False, True, id="shared-on-every-cpu"),
    ],
)
def test_a_sample_judges_each_container_against_the_claims(
    inguest: Any, allowed: str, held: str, violation: bool, off: bool
) -> None:
    record = fresh()
    sample(inguest, {"c1": (allowed, allowed, held)}, record)
    seen = record["containers"]["c1"]
    assert bool(record["violations"]) == violation
    assert seen["off_samples"] == int(off)
    assert (seen["pinned_at"] is None) == off


def test_a_container_moving_between_the_two_reads_is_not_judged(inguest: Any) -> None:
    record = fresh()
    sample(inguest, {"c1": ("0-7", "2-3", "2-3")}, record)
    assert record["violations"] == []
    assert record["containers"]["c1"]["off_samples"] == 0


def test_a_container_is_pinned_from_its_first_sample_on_its_cpuset(inguest: Any) -> None:
    record = fresh()
    sample(inguest, {"c1": ("0-7", "0-7", "2-3")}, record)
    sample(inguest, {"c1": ("2-3", "2-3", "2-3")}, record)
    seen = record["containers"]["c1"]
    assert seen["samples"] == 2 and seen["off_samples"] == 1
    assert seen["pinned_at"] is not None and seen["pinned_at"] >= seen["first_seen"]
    assert len(record["violations"]) == 1


def test_an_exiting_process_is_not_judged(inguest: Any) -> None:
    # A container's process that has exited and is not yet reaped keeps its CPUs and its
    # cgroup but not its memory: its environment reads empty (or not at all, as kernels
    # differ), and read as a container holding no claim it would be an unclaimed container on
    # a claim's CPUs. A real zombie of this host's kernel, on CPUs of a claim.
    child = os.fork()
    if child == 0:
        os._exit(0)
    try:
        wait_for(
            lambda: status_field(child, "State").startswith("Z"), "the child a zombie", timeout=30
        )
        cpus = CPUSet.parse(status_field(child, "Cpus_allowed_list"))
        inguest._container_processes = lambda: {"c1": (child, "/kubepods/pod1/c1")}
        record = fresh()
        inguest._sample({"a": cpus}, record)
    finally:
        os.waitpid(child, 0)
    assert record["containers"] == {} and record["errors"] == []


def test_a_process_whose_environment_reads_empty_is_exiting(inguest: Any, tmp_path: Path) -> None:
    # How the guest's kernel (6.1) answers a zombie's environ: no bytes (newer ones refuse).
    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "environ").write_bytes(b"")
    (tmp_path / "7" / "status").write_text("Name:\tsh\nState:\tZ (zombie)\nCpus_allowed_list:\t1\n")
    with pytest.raises(LookupError, match="exiting"):
        inguest._process_cpus(7, tmp_path)
