"""tools/controlplane.sh stop and resume (an outage of the test control plane, its data kept):
bad input gets one line and exit 2, before anything is stopped or started. Stopping and
resuming a running control plane is the big-node tier's outage scenario
(tests/bignode/test_bignode_outage.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "controlplane.sh"


def controlplane(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=60, check=False
    )


@pytest.mark.parametrize(
    ("args", "line"),
    [
        pytest.param(
            ("stop", "{dir}", "kubelet"),
            "controlplane: error: stop: no process 'kubelet' (one of: etcd apiserver scheduler",
            id="stop-names-a-process-it-does-not-run",
        ),
        pytest.param(
            ("stop", "{dir}", "etcd"),
            "controlplane: error: stop: etcd is not running in {dir}",
            id="stop-of-a-process-not-running",
        ),
        pytest.param(
            ("resume", "{dir}"),
            "controlplane: error: resume: no control plane was started in {dir}",
            id="resume-where-nothing-was-started",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: tuple[str, ...], line: str) -> None:
    done = controlplane(*(a.format(dir=tmp_path) for a in args))
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert done.stderr.startswith(line.format(dir=tmp_path))
    assert list(tmp_path.iterdir()) == []  # nothing written
