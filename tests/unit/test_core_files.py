"""The one atomic writer: a reader sees the old file or the new one, never a part; durable
writes reach the disk (the file and its folder) before the call returns."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from dracpu.core.files import remove_durable, remove_stale_temps, write_atomic


def test_a_write_replaces_the_file_whole_with_its_mode_and_leaves_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "spec.json"
    target.write_bytes(b"old")
    write_atomic(target, b"new", durable=False, mode=0o600)
    assert target.read_bytes() == b"new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.json"]


def test_a_missing_folder_is_made(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "file"
    write_atomic(target, b"x", durable=True)
    assert target.read_bytes() == b"x"


def test_a_write_that_fails_before_the_rename_keeps_the_old_file_and_removes_its_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "record.json"
    target.write_bytes(b"old")

    def no_room(*args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", no_room)
    with pytest.raises(OSError, match="No space left"):
        write_atomic(target, b"new", durable=True)
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["record.json"]


def test_a_process_killed_between_write_and_rename_leaves_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "record.json"
    target.write_bytes(b"old")
    # The process dies where the rename would be: no cleanup runs, as after a kill -9.
    script = (
        "import os, sys\n"
        "from dracpu.core.files import write_atomic\n"
        "os.replace = lambda *a: os._exit(9)\n"
        "write_atomic(sys.argv[1], b'new', durable=True)\n"
    )
    died = subprocess.run([sys.executable, "-c", script, str(target)], check=False)
    assert died.returncode == 9
    assert target.read_bytes() == b"old"
    temps = [p.name for p in tmp_path.iterdir() if p.name != "record.json"]
    assert len(temps) == 1 and temps[0].startswith(".record.json.")
    assert temps[0].endswith(".tmp")  # never .json: no reader loads it
    assert remove_stale_temps(tmp_path, "record.json") == temps
    assert sorted(p.name for p in tmp_path.iterdir()) == ["record.json"]


def _recording_fsync(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What each fsync and fdatasync call synced, in order: `file data` (fdatasync of a
    file), `file` (fsync of a file) or `folder`."""
    synced: list[str] = []
    real_fsync, real_fdatasync = os.fsync, os.fdatasync

    def fsync(fd: int) -> None:
        mode = os.fstat(fd).st_mode
        synced.append("folder" if stat.S_ISDIR(mode) else "file")
        real_fsync(fd)

    def fdatasync(fd: int) -> None:
        mode = os.fstat(fd).st_mode
        synced.append("folder data" if stat.S_ISDIR(mode) else "file data")
        real_fdatasync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "fdatasync", fdatasync)
    return synced


def test_a_durable_write_syncs_the_file_data_then_its_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced = _recording_fsync(monkeypatch)
    write_atomic(tmp_path / "claim.json", b"{}", durable=True)
    assert synced == ["file data", "folder"]


def test_a_write_that_need_not_be_durable_syncs_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced = _recording_fsync(monkeypatch)
    write_atomic(tmp_path / "status.json", b"{}", durable=False)
    assert synced == []


def test_a_durable_removal_syncs_the_folder_and_says_whether_the_file_was_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "spec.json"
    target.write_bytes(b"{}")
    synced = _recording_fsync(monkeypatch)
    assert remove_durable(target) is True
    assert synced == ["folder"]
    assert remove_durable(target) is False
    assert not target.exists()
