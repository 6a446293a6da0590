"""The kernel's isolated and nohz_full CPU lists: every spelling the kernel uses, and files that
are absent or garbled (read as no isolation, never a failed discovery)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dracpu.core.cpuset import CPUSet
from dracpu.topology.discovery import discover
from dracpu.topology.fixtures import write_fixture

CPU = "devices/system/cpu"
SYS = Path("/sys")


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        pytest.param(None, "", id="absent"),
        pytest.param("\n", "", id="empty"),
        pytest.param("(null)\n", "", id="null-of-older-kernels"),
        pytest.param("2-3,6\n", "2-3,6", id="list"),
        # Isolation may name CPUs that are offline or beyond this machine; kept as written.
        pytest.param("7,100\n", "7,100", id="beyond-the-machine"),
        pytest.param("two-three\n", "", id="garbled"),
        pytest.param(b"\xff\xfe", "", id="not-ascii"),
    ],
)
@pytest.mark.parametrize("name", ["isolated", "nohz_full"])
def test_isolation_lists(
    tmp_path: Path, name: str, content: str | bytes | None, expected: str
) -> None:
    root = write_fixture("single-4c8t", tmp_path / "sys")
    path = root / CPU / name
    path.unlink(missing_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    machine = discover(root)
    value = machine.isolated if name == "isolated" else machine.nohz_full
    assert value.format() == expected
    assert len(machine.cpus) == 8


def test_unreadable_list_is_no_isolation(tmp_path: Path) -> None:
    root = write_fixture("isolated-rt", tmp_path / "sys")
    path = root / CPU / "isolated"
    path.unlink()
    path.mkdir()  # reading a directory fails with EISDIR, whoever runs the test
    assert discover(root).isolated == CPUSet()


@pytest.mark.skipif(not (SYS / CPU).is_dir(), reason="no /sys on this machine")
def test_this_machine_matches_the_kernel_files() -> None:
    machine = discover(SYS)
    for name, value in (("isolated", machine.isolated), ("nohz_full", machine.nohz_full)):
        path = SYS / CPU / name
        text = path.read_text().strip() if os.path.exists(path) else ""
        assert value == (CPUSet() if text in ("", "(null)") else CPUSet.parse(text)), name
