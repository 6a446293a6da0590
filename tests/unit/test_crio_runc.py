"""tools/crio-runc.py, the runc the one-node cluster's CRI-O calls: a bundle's negative
oomScoreAdj raised to the caller's own, hugepageLimits dropped without a hugetlb hierarchy,
everything else of the bundle and runc's arguments left as they were."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from harness.tool_script import load_tool

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "crio-runc.py"


def _config(adj: int) -> dict[str, Any]:
    return {
        "process": {"args": ["/pause"], "oomScoreAdj": adj},
        "linux": {
            "resources": {"hugepageLimits": [{"pageSize": "2MB", "limit": 0}], "cpu": {"shares": 2}}
        },
    }


@pytest.mark.parametrize(
    ("own", "asked", "mounted", "adj", "hugepages"),
    [
        (0, -997, False, 0, False),  # a critical pod on a node without the capability
        (0, 1000, False, 1000, False),  # a best-effort pod: left as it is
        (-999, -997, True, -997, True),  # a runtime that may lower it: nothing changes
    ],
)
def test_a_bundle_is_fitted_to_the_machine(
    monkeypatch: pytest.MonkeyPatch, own: int, asked: int, mounted: bool, adj: int, hugepages: bool
) -> None:
    module = load_tool("crio-runc")
    monkeypatch.setattr(module, "own_oom_score_adj", lambda: own)
    monkeypatch.setattr(module, "hugetlb_mounted", lambda: mounted)
    config = _config(asked)
    assert module.fit(config) == (adj != asked or not hugepages)
    assert config["process"]["oomScoreAdj"] == adj
    assert ("hugepageLimits" in config["linux"]["resources"]) == hugepages
    assert config["linux"]["resources"]["cpu"] == {"shares": 2}


def test_runc_gets_the_same_arguments_and_the_fitted_bundle(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "config.json").write_text(json.dumps(_config(-997)))
    fake = tmp_path / "runc"
    fake.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {tmp_path}/args\n')
    fake.chmod(0o755)
    argv = ["--root=/x", "create", "--bundle", str(bundle), "--pid-file", "p", "id1"]
    subprocess.run([sys.executable, str(SCRIPT), str(fake), *argv], check=True, timeout=30)
    assert (tmp_path / "args").read_text().splitlines() == argv
    adj = json.loads((bundle / "config.json").read_text())["process"]["oomScoreAdj"]
    assert adj == max(-997, int(Path("/proc/self/oom_score_adj").read_text()))
    # Without a bundle (runc state, kill, delete) nothing is read or written.
    subprocess.run([sys.executable, str(SCRIPT), str(fake), "state", "id1"], check=True, timeout=30)
    assert (tmp_path / "args").read_text().splitlines() == ["state", "id1"]
