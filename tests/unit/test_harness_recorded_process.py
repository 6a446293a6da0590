"""When a restarted process counts as gone (harness.recorded_process.gone): only once nothing
of it runs and it holds nothing, so the command started again can bind the same port. A
thread group leader that has exited shows as a zombie while its other threads still run and
hold the process's files: a restart at that moment finds the port in use."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from harness.recorded_process import gone, restart, state
from harness.waits import wait_for

# The exit(2) system call, which ends the calling thread only.
SYS_EXIT = {"x86_64": 60, "aarch64": 93}.get(os.uname().machine)

LEADER_EXITS_FIRST = textwrap.dedent(
    """
    import ctypes, socket, sys, threading, time
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    threading.Thread(target=lambda: time.sleep(3600)).start()
    print(listener.getsockname()[1], flush=True)
    ctypes.CDLL(None, use_errno=True).syscall(int(sys.argv[1]), 0)
    """
)


def _bindable(port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def test_a_killed_process_is_gone_once_it_has_exited() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    assert not gone(child.pid)
    child.kill()
    wait_for(lambda: gone(child.pid), "the killed child gone", timeout=30, interval=0.05)
    child.wait()
    assert gone(child.pid)


@pytest.mark.skipif(SYS_EXIT is None, reason="exit(2)'s number is known for x86_64 and aarch64")
def test_a_zombie_leader_whose_threads_still_run_is_not_gone_and_still_holds_its_port() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", LEADER_EXITS_FIRST, str(SYS_EXIT)], stdout=subprocess.PIPE
    )
    try:
        assert child.stdout is not None
        port = int(child.stdout.readline())
        wait_for(lambda: state(child.pid) == "Z", "the leader a zombie", timeout=30)
        assert len(os.listdir(f"/proc/{child.pid}/task")) == 2
        assert not gone(child.pid)
        assert not _bindable(port)  # what a restart at this moment would meet
        os.kill(child.pid, signal.SIGKILL)
        wait_for(lambda: gone(child.pid), "the whole group gone", timeout=30, interval=0.05)
        assert _bindable(port)
    finally:
        child.kill()
        child.wait()


# Runs while `flag` exists; otherwise makes it and fails, as a kubelet started while its
# runtime is not serving yet fails and serves at the next start.
FAILS_ONCE = textwrap.dedent(
    """
    import os, sys, time
    if not os.path.exists("flag"):
        open("flag", "w").close()
        sys.exit(1)
    print("serving", flush=True)
    time.sleep(3600)
    """
)


def _running(pidfile: Path) -> int | None:
    pid = int(pidfile.read_text())
    return None if gone(pid) else pid


def test_a_start_that_fails_is_started_again_and_a_stop_is_not(tmp_path: Path) -> None:
    (tmp_path / "flag").touch()
    first = subprocess.Popen(
        [sys.executable, "-c", FAILS_ONCE],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    assert first.stdout is not None and first.stdout.readline() == b"serving\n"
    pidfile, log = tmp_path / "unit.pid", tmp_path / "unit.log"
    pidfile.write_text(f"{first.pid}\n")
    (tmp_path / "flag").unlink()

    failing = restart(pidfile, log, restart_sec=0.1)
    first.wait()
    wait_for(lambda: (_running(pidfile) or failing) != failing, "started again", timeout=30)
    serving = _running(pidfile)
    assert serving is not None and serving != failing
    assert "exited with status 1; starting again" in log.read_text()

    os.kill(serving, signal.SIGTERM)  # a stop: not started again
    supervisor = f"reap-{failing}"
    wait_for(
        lambda: all(t.name != supervisor for t in threading.enumerate()),
        "the supervision ended",
        timeout=30,
    )
    assert gone(serving) and pidfile.read_text().strip() == str(serving)
