"""`dev claim` injects what a runtime would: the env edits of the CDI devices it was given."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dracpu.core.cdi import CDI_VERSION
from dracpu.core.errors import NotFoundError
from dracpu.dev.cdi_specs import resolve_env


def write_spec(directory: Path, name: str, spec: object) -> None:
    (directory / name).write_text(json.dumps(spec) if name.endswith(".json") else str(spec))


def spec(kind: str, device: str, env: list[str], common: list[str] | None = None) -> object:
    document: dict[str, object] = {
        "cdiVersion": CDI_VERSION,
        "kind": kind,
        "devices": [{"name": device, "containerEdits": {"env": env}}],
    }
    if common is not None:
        document["containerEdits"] = {"env": common}
    return document


@pytest.fixture
def cdi(tmp_path: Path) -> Path:
    write_spec(tmp_path, "a.json", spec("dra.k8s.io/cpu", "claim-a", ["DRA_CPUSET_a=0-1"]))
    write_spec(
        tmp_path, "b.json", spec("dra.k8s.io/cpu", "claim-b", ["DRA_CPUSET_b=4"], ["COMMON=1"])
    )
    write_spec(tmp_path, "other.json", spec("vendor.example/gpu", "claim-a", ["GPU=0"]))
    write_spec(tmp_path, "broken.json", "{not json")
    write_spec(tmp_path, "partial.json.tmp", spec("dra.k8s.io/cpu", "claim-c", ["X=1"]))
    return tmp_path


@pytest.mark.parametrize(
    ("ids", "env"),
    [
        pytest.param(["dra.k8s.io/cpu=claim-a"], ["DRA_CPUSET_a=0-1"], id="one"),
        pytest.param(["dra.k8s.io/cpu=claim-b"], ["COMMON=1", "DRA_CPUSET_b=4"], id="spec-edits"),
        pytest.param(
            ["dra.k8s.io/cpu=claim-a", "dra.k8s.io/cpu=claim-b"],
            ["DRA_CPUSET_a=0-1", "COMMON=1", "DRA_CPUSET_b=4"],
            id="two",
        ),
        pytest.param(["vendor.example/gpu=claim-a"], ["GPU=0"], id="kind-matters"),
        pytest.param([], [], id="none"),
    ],
)
def test_env_of_resolved_devices(cdi: Path, ids: list[str], env: list[str]) -> None:
    assert resolve_env(cdi, ids) == env


@pytest.mark.parametrize(
    "device_id",
    ["dra.k8s.io/cpu=claim-missing", "dra.k8s.io/cpu=claim-c", "dra.k8s.io/gpu=claim-a"],
    ids=["no-device", "temp-file-ignored", "wrong-kind"],
)
def test_unresolvable_devices_are_refused(cdi: Path, device_id: str) -> None:
    with pytest.raises(NotFoundError, match=f"unresolvable CDI device {device_id}"):
        resolve_env(cdi, [device_id])
