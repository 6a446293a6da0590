"""The durable files: CDI specs as runtimes read them, and the checksummed checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dracpu.allocator import cdi, checkpoint
from dracpu.allocator.claims import Allocation, ClaimRecord, Owner
from dracpu.core.cpuset import CPUSet
from dracpu.core.errors import InvalidInputError, StateError

SPEC_WITH_ENV = (
    '{"kind": "dra.k8s.io/cpu", '
    '"devices": [{"name": "claim-u1", "containerEdits": {"env": ["ENV"]}}]}'
)
UID = "0f4e8b8e-3a8a-4c55-9d5f-6e2d1c7a9b10"


def test_cdi_spec_file_and_content(tmp_path: Path) -> None:
    path = cdi.write_spec(tmp_path, UID, CPUSet.parse("2-5,10"))
    assert path.name == f"dra.k8s.io-cpu_claim-{UID}.json"
    assert json.loads(path.read_text()) == {
        "cdiVersion": "0.3.0",
        "kind": "dra.k8s.io/cpu",
        "devices": [
            {"name": f"claim-{UID}", "containerEdits": {"env": [f"DRA_CPUSET_{UID}=2-5,10"]}}
        ],
    }
    assert cdi.qualified_name(UID) == f"dra.k8s.io/cpu=claim-{UID}"
    # Only the spec itself is left: the temp file was renamed over it.
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


def test_cdi_spec_round_trip_and_removal(tmp_path: Path) -> None:
    cdi.write_spec(tmp_path, "a1", CPUSet.parse("1-2"))
    cdi.write_spec(tmp_path, "b2", CPUSet.parse("7"))
    cdi.write_spec(tmp_path, "a1", CPUSet.parse("3-4"))  # overwrite
    found = [
        (s.uid, s.cpus.format()) for s in cdi.read_specs(tmp_path) if not isinstance(s, StateError)
    ]
    assert found == [("a1", "3-4"), ("b2", "7")]
    assert cdi.remove_spec(tmp_path, "a1") is True
    assert cdi.remove_spec(tmp_path, "a1") is False
    assert [s.uid for s in cdi.read_specs(tmp_path) if not isinstance(s, StateError)] == ["b2"]


@pytest.mark.parametrize(
    "uid", ["", "a/b", "a b", "x-"], ids=["empty", "slash", "space", "dash-last"]
)
def test_uids_that_cannot_name_a_cdi_device(uid: str) -> None:
    with pytest.raises(InvalidInputError):
        cdi.check_uid(uid)


def test_claim_prefix_makes_any_alnum_uid_a_device_name() -> None:
    # `claim-` supplies the leading letter the CDI name rules ask for.
    assert cdi.check_uid("-x") == "-x"
    assert cdi.check_uid(UID) == UID


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("{", "not a claim spec"),
        ('{"kind": "other/x", "devices": []}', "kind is not dra.k8s.io/cpu"),
        (
            '{"kind": "dra.k8s.io/cpu", "devices": [{"name": "claim-zz"}]}',
            "device name is not claim-u1",
        ),
        (
            SPEC_WITH_ENV.replace("ENV", "DRA_CPUSET_u1=x"),
            "invalid item",
        ),
        (
            SPEC_WITH_ENV.replace("ENV", "DRA_CPUSET_u1="),
            "empty cpuset",
        ),
    ],
    ids=["truncated", "foreign-kind", "wrong-device", "bad-cpuset", "empty-cpuset"],
)
def test_unreadable_specs_are_reported_not_trusted(
    tmp_path: Path, content: str, problem: str
) -> None:
    (tmp_path / "dra.k8s.io-cpu_claim-u1.json").write_text(content)
    (only,) = list(cdi.read_specs(tmp_path))
    assert isinstance(only, StateError)
    assert problem in str(only)


def test_files_of_other_vendors_and_temp_files_are_ignored(tmp_path: Path) -> None:
    (tmp_path / "nvidia.com-gpu.json").write_text("{}")
    (tmp_path / ".dra.k8s.io-cpu_claim-u1.json.abc.tmp").write_text("{")
    assert list(cdi.read_specs(tmp_path)) == []
    assert list(cdi.read_specs(tmp_path / "missing")) == []


RECORD = ClaimRecord(
    uid="u1",
    namespace="ns",
    name="c",
    cpus=CPUSet.parse("1-2,21-22"),
    allocations=(
        Allocation("req", "node", "cpudevnuma000", CPUSet.parse("1-2,21-22"), 4, "spread"),
    ),
    prepared_at_ns=7,
    owner=Owner("pod", "app", "ns", "p"),
    container_id="cid",
)


def test_checkpoint_round_trip(tmp_path: Path) -> None:
    written = checkpoint.Checkpoint(
        records=(RECORD,),
        pool_generation=3,
        claims_generation=4,
        devices_generation=2,
        devices_fingerprint="abc",
        written_at_ns=9,
    )
    checkpoint.write(tmp_path, written)
    loaded = checkpoint.load(tmp_path)
    assert loaded == written
    assert checkpoint.load(tmp_path / "missing") is None


def _rewrite(path: Path, change: object) -> None:
    document = json.loads(path.read_text())
    if callable(change):
        change(document)
    path.write_text(json.dumps(document))


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda d: d["state"]["claims"][0].update(cpus="1-3"), "checksum mismatch"),
        (lambda d: d.update(formatVersion=99), "unknown format version 99"),
        (lambda d: d.pop("checksum"), "checksum mismatch"),
    ],
    ids=["edited-content", "unknown-version", "no-checksum"],
)
def test_checkpoint_damage_is_detected(tmp_path: Path, damage: object, message: str) -> None:
    checkpoint.write(tmp_path, checkpoint.Checkpoint(records=(RECORD,)))
    _rewrite(checkpoint.path_in(tmp_path), damage)
    with pytest.raises(checkpoint.CorruptCheckpointError, match=message):
        checkpoint.load(tmp_path)


def test_truncated_checkpoint_is_corrupt_and_moved_aside(tmp_path: Path) -> None:
    checkpoint.write(tmp_path, checkpoint.Checkpoint(records=(RECORD,)))
    path = checkpoint.path_in(tmp_path)
    path.write_bytes(path.read_bytes()[:40])
    with pytest.raises(checkpoint.CorruptCheckpointError, match="not valid JSON"):
        checkpoint.load(tmp_path)
    aside = checkpoint.move_aside(tmp_path)
    assert aside.name.startswith("allocator-checkpoint.json.corrupt-")
    assert not path.exists() and aside.exists()
    assert checkpoint.load(tmp_path) is None
