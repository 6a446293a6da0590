"""A sysfs tree with planted files: discovery reads neither a FIFO (it would block) nor a file
a symlink leads to outside the tree."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dracpu.topology.sysfs import Missing, SysfsReader

pytestmark = pytest.mark.security


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "online")
    found = SysfsReader(tmp_path).text("online")
    assert isinstance(found, Missing) and found.reason == "not a regular file"


def test_a_symlink_out_of_the_tree_is_not_followed(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("0-3")
    root = tmp_path / "sys"
    root.mkdir()
    (root / "online").symlink_to(secret)
    (root / "inside").write_text("0-1")
    (root / "alias").symlink_to(root / "inside")
    reader = SysfsReader(root)
    found = reader.text("online")
    assert isinstance(found, Missing) and "outside" in found.reason
    assert reader.text("alias") == "0-1"
