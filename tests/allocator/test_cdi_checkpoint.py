"""The durable files: CDI specs as runtimes read them, the checksummed claim record files, the
node file, the generations line, and the old single-file checkpoint read for migration."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dracpu.allocator.claims import Allocation, ClaimRecord, Owner
from dracpu.allocator.store import cdi, checkpoint, records
from dracpu.core.cdi import CDI_VERSION
from dracpu.core.cpuset import CPUSet
from dracpu.core.driver import cdi_device_id
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
        "cdiVersion": CDI_VERSION,
        "kind": "dra.k8s.io/cpu",
        "devices": [
            {"name": f"claim-{UID}", "containerEdits": {"env": [f"DRA_CPUSET_{UID}=2-5,10"]}}
        ],
    }
    assert cdi_device_id(UID) == f"dra.k8s.io/cpu=claim-{UID}"
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


def write_legacy(state_dir: Path, saved: checkpoint.Checkpoint) -> Path:
    """A checkpoint as builds before the per-claim records wrote it."""
    path = checkpoint.path_in(state_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(checkpoint.encode(saved))
    return path


def test_legacy_checkpoint_round_trip(tmp_path: Path) -> None:
    written = checkpoint.Checkpoint(
        records=(RECORD,),
        pool_generation=3,
        claims_generation=4,
        devices_generation=2,
        devices_fingerprint="abc",
        written_at_ns=9,
    )
    write_legacy(tmp_path, written)
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
def test_legacy_checkpoint_damage_is_detected(tmp_path: Path, damage: object, message: str) -> None:
    _rewrite(write_legacy(tmp_path, checkpoint.Checkpoint(records=(RECORD,))), damage)
    with pytest.raises(checkpoint.CorruptCheckpointError, match=message):
        checkpoint.load(tmp_path)


def test_truncated_legacy_checkpoint_is_corrupt(tmp_path: Path) -> None:
    path = write_legacy(tmp_path, checkpoint.Checkpoint(records=(RECORD,)))
    path.write_bytes(path.read_bytes()[:40])
    with pytest.raises(checkpoint.CorruptCheckpointError, match="not valid JSON"):
        checkpoint.load(tmp_path)


def test_claim_record_file_round_trip(tmp_path: Path) -> None:
    records.write_record(tmp_path, RECORD)
    path = records.record_path(tmp_path, "u1")
    assert path == tmp_path / "claims" / "u1.json"
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    loaded = records.load_records(tmp_path)
    assert loaded is not None and loaded.records == {"u1": RECORD} and loaded.bad == []
    assert records.remove_record(tmp_path, "u1") is True
    assert records.remove_record(tmp_path, "u1") is False
    assert records.load_records(tmp_path) == records.LoadedRecords()
    assert records.load_records(tmp_path / "missing") is None


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda d: d["body"].update(cpus="1-3"), "checksum mismatch"),
        (lambda d: d.update(formatVersion=99), "unknown format version 99"),
        (lambda d: d.pop("checksum"), "checksum mismatch"),
        (lambda d: d.update(body=[], checksum=records.digest([])), "malformed content"),
        (
            lambda d: (d["body"].update(uid="u2"), d.update(checksum=records.digest(d["body"]))),
            "holds claim 'u2', not 'u1'",
        ),
    ],
    ids=["edited-content", "unknown-version", "no-checksum", "not-a-record", "other-claim"],
)
def test_claim_record_damage_is_detected(tmp_path: Path, damage: object, message: str) -> None:
    records.write_record(tmp_path, RECORD)
    _rewrite(records.record_path(tmp_path, "u1"), damage)
    loaded = records.load_records(tmp_path)
    assert loaded is not None and loaded.records == {}
    assert [(b.uid, b.path.name) for b in loaded.bad] == [("u1", "u1.json")]
    assert message in loaded.bad[0].error


def test_loading_claim_records_reads_only_record_files(tmp_path: Path) -> None:
    records.write_record(tmp_path, RECORD)
    directory = records.claims_dir(tmp_path)
    (directory / ".u9.json.abc123.tmp").write_text("{half a wr")  # a write cut short
    (directory / "u8.json.corrupt-20260101T000000Z-000001").write_text("set aside earlier")
    torn = directory / "u7.json"
    torn.write_bytes(records.encode_record(RECORD)[:30])
    loaded = records.load_records(tmp_path)
    assert loaded is not None and list(loaded.records) == ["u1"]
    assert [b.uid for b in loaded.bad] == ["u7"] and "not valid JSON" in loaded.bad[0].error
    aside = records.move_aside(torn)
    assert aside.name.startswith("u7.json.corrupt-") and not torn.exists()
    again = records.load_records(tmp_path)
    assert again is not None and again.bad == []


def test_node_file_round_trip_and_damage(tmp_path: Path) -> None:
    assert records.load_node(tmp_path) is None
    written = records.NodeFile(3, 4, 2, "abc", {"mode": "grouped"})
    records.write_node(tmp_path, written)
    assert records.load_node(tmp_path) == written
    _rewrite(records.node_path(tmp_path), lambda d: d["body"].update(devicesGeneration=7))
    with pytest.raises(records.CorruptRecordError, match="checksum mismatch"):
        records.load_node(tmp_path)


@pytest.mark.parametrize("durable", [True, False], ids=["atomic", "in-place"])
def test_generations_line(tmp_path: Path, durable: bool) -> None:
    assert records.read_generations(tmp_path) is None
    records.save_generations(tmp_path, 12, 3456, durable=durable)
    assert records.read_generations(tmp_path) == (12, 3456)
    records.save_generations(tmp_path, 13, 3457)  # overwritten in place
    assert records.read_generations(tmp_path) == (13, 3457)
    path = tmp_path / records.GENERATIONS_FILE
    line = path.read_bytes()
    path.write_bytes(line.replace(b"pool=0", b"pool=9", 1))  # a torn or edited line
    assert records.read_generations(tmp_path) is None
    path.write_bytes(line[:20])
    assert records.read_generations(tmp_path) is None
