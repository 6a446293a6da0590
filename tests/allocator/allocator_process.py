"""Run the allocator (and the topology service) as real processes on temporary sockets."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from harness.waits import wait_for

REPO = Path(__file__).resolve().parents[2]


def spawn(module: str, args: Sequence[str], log: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    with log.open("ab") as sink:
        return subprocess.Popen(
            [sys.executable, "-m", module, *args],
            stdout=sink,
            stderr=sink,
            env=env,
            cwd=REPO,
        )


def stop(process: subprocess.Popen[bytes], sig: int = signal.SIGTERM, timeout: float = 10.0) -> int:
    if process.poll() is None:
        process.send_signal(sig)
    return process.wait(timeout=timeout)


_LAUNCHER = r"""
import json, os, signal, sys
import dracpu.allocator.main as entry
import dracpu.allocator.runtime  # what main() imports after parsing: loaded once, here

signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
for line in sys.stdin:
    argv, log = json.loads(line)
    pid = os.fork()
    if pid == 0:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        code = 1
        try:
            code = entry.main(argv)
        finally:
            os._exit(code)
    print(pid, flush=True)
"""


class Launcher:
    """Starts allocator processes by forking a process that has already imported the entry
    module: each one is a real, separate process running `dracpu.allocator.main.main`, minus
    the interpreter start-up, which would otherwise dominate a loop of a hundred restarts."""

    def __init__(self) -> None:
        self._process = subprocess.Popen(
            [sys.executable, "-c", _LAUNCHER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=REPO,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )

    def start(self, argv: Sequence[str], log: Path) -> int:
        assert self._process.stdin is not None and self._process.stdout is not None
        self._process.stdin.write((json.dumps([list(argv), str(log)]) + "\n").encode())
        self._process.stdin.flush()
        return int(self._process.stdout.readline())

    def close(self) -> None:
        if self._process.stdin is not None:
            self._process.stdin.close()
        self._process.wait(timeout=10)


def kill_and_wait(pid: int, timeout: float = 10.0) -> None:
    """SIGKILL a launched process and wait until it is gone."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    wait_for(
        lambda: not alive(pid), f"process {pid} gone after SIGKILL", timeout=timeout, interval=0.005
    )


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
