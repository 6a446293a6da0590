"""The instance lock of a service's socket (dracpu.core.instance_lock): who holds it is written
in it, a second holder is refused while the first lives, and a folder that cannot hold it gets
the operator the same one-line reason a socket there would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dracpu.core.errors import UnavailableError
from dracpu.core.instance_lock import InstanceLock, lock_path

HOLD = "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); " \
    "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)"  # fmt: skip


async def test_the_lock_is_taken_at_once_when_free_and_names_its_holder(tmp_path: Path) -> None:
    lock = InstanceLock(tmp_path / "allocator.sock", "allocator")
    assert await lock.acquire() == 0.0 and lock.held
    assert lock_path(tmp_path / "allocator.sock").read_text().startswith(f"pid {os.getpid()} on ")
    lock.release()
    assert not lock.held


def test_another_process_holding_it_keeps_it(tmp_path: Path) -> None:
    socket = tmp_path / "nri-plugin.sock"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(lock_path(socket))], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        assert not InstanceLock(socket, "nri-plugin").try_acquire()
    finally:
        holder.kill()
        holder.wait()
    assert InstanceLock(socket, "nri-plugin").try_acquire()


def test_a_folder_that_cannot_hold_it_is_one_clear_reason(tmp_path: Path) -> None:
    blocker = tmp_path / "run"
    blocker.write_text("a file where the socket folder should be")
    with pytest.raises(UnavailableError) as refused:
        InstanceLock(blocker / "topology.sock", "topology").try_acquire()
    message = str(refused.value)
    assert message.startswith(f"cannot listen on {blocker / 'topology.sock'}: cannot create ")
    assert "mount a writable volume" in message
