"""A node left by a killed run is swept by the next start; a live run's node never is.

The lock a node holds on `node.lock` is the test process's own: the kernel drops it when that
process dies, whatever killed it. No runtime is needed to check the rule itself."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from harness.containerd_node import LOCK, RECORD, sweep_abandoned
from harness.waits import wait_for

HOLD = """
import fcntl, sys, time
handle = open(sys.argv[1], "a")
fcntl.flock(handle, fcntl.LOCK_EX)
print("locked", flush=True)
time.sleep(60)
"""


def make_node(base: Path) -> Path:
    base.mkdir(parents=True)
    record = base / RECORD
    record.write_text(json.dumps({"containerd_pid": 0, "socket": "", "cgroup_parent": ""}))
    return record


def test_a_node_whose_process_died_is_swept_and_its_record_removed(tmp_path: Path) -> None:
    record = make_node(tmp_path / "dracpu-rn-dead" / "node")

    assert sweep_abandoned(tmp_path) == [record.parent]
    assert not record.exists()


def test_a_node_whose_process_lives_is_left_alone_until_it_dies(tmp_path: Path) -> None:
    record = make_node(tmp_path / "dracpu-rn-live")
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(record.parent / LOCK)], stdout=subprocess.PIPE
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"locked"
        assert sweep_abandoned(tmp_path) == []
        assert record.exists()
    finally:
        holder.kill()
        holder.wait()

    def swept() -> bool:
        sweep_abandoned(tmp_path)
        return not record.exists()

    wait_for(swept, "the record swept once its holder is gone", timeout=5, interval=0.05)


def test_directories_of_other_names_are_not_looked_at(tmp_path: Path) -> None:
    record = make_node(tmp_path / "someone-else" / "node")

    assert sweep_abandoned(tmp_path) == []
    assert record.exists()
