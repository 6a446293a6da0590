"""Restarting a process that a tool started detached and recorded in a PID file (tools/lib.sh
start_recorded: tools/controlplane.sh's API server, tools/cluster.sh's containerd and kubelet),
as a service manager restarts a unit: the process is signalled, waited for, and started again
with the same command line, environment and working directory, its output appended to the
same log, the new PID recorded."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from harness.waits import wait_for


@dataclass(frozen=True)
class Recorded:
    """What a running process was started with, read from /proc before it is stopped."""

    pid: int
    argv: list[str]
    env: dict[str, str]
    cwd: str


def read_recorded(pidfile: Path) -> Recorded:
    """The recorded process, alive; a RuntimeError in one line when it is not."""
    try:
        pid = int(pidfile.read_text().strip())
        proc = Path(f"/proc/{pid}")
        argv = [a.decode() for a in (proc / "cmdline").read_bytes().split(b"\0") if a]
        raw = (proc / "environ").read_bytes().split(b"\0")
        cwd = os.readlink(proc / "cwd")
    except (OSError, ValueError) as exc:
        raise RuntimeError(f"no running process recorded in {pidfile}: {exc}") from None
    if not argv:
        raise RuntimeError(f"the process recorded in {pidfile} (pid {pid}) has exited")
    env = dict(e.decode().partition("=")[::2] for e in raw if b"=" in e)
    return Recorded(pid, argv, env, cwd)


def state(pid: int) -> str:
    """The process's state letter in /proc/<pid>/stat (R, S, D, Z...); OSError when it has no
    entry there."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0]


def gone(pid: int) -> bool:
    """The process no longer runs and holds nothing (its listening sockets among what it
    held). A zombie is gone once its whole thread group is: a thread group leader that has
    exited shows as a zombie while its other threads still run, the open files with them."""
    try:
        if state(pid) not in ("Z", "X"):
            return False
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")] == [pid]
    except (OSError, IndexError, ValueError):
        return True


def restart(
    pidfile: Path,
    log: Path,
    *,
    sig: int = signal.SIGTERM,
    timeout: float = 60.0,
    restart_sec: float | None = None,
) -> int:
    """`sig` to the recorded process (SIGKILL after `timeout`), then the same command started
    again detached; answers the new PID (written to `pidfile`). With `restart_sec`, as a unit
    with `Restart=on-failure` and that `RestartSec`: a start that exits with an error (a
    kubelet whose runtime is not serving yet, a server whose port is still held) is started
    again after that long, for as long as `pidfile` names it; a stop (a signal, a clean exit,
    the PID file removed or naming another process) ends that."""
    was = read_recorded(pidfile)
    os.kill(was.pid, sig)
    try:
        wait_for(lambda: gone(was.pid), f"pid {was.pid} to exit", timeout=timeout, interval=0.1)
    except AssertionError:
        os.kill(was.pid, signal.SIGKILL)
        wait_for(lambda: gone(was.pid), f"pid {was.pid} killed", timeout=30, interval=0.1)
    started = _start(was, pidfile, log)
    # Reaped when it ends, so a later stop sees it gone rather than a zombie.
    threading.Thread(
        target=_supervise,
        args=(started, was, pidfile, log, restart_sec),
        name=f"reap-{started.pid}",
        daemon=True,
    ).start()
    return started.pid


def _start(was: Recorded, pidfile: Path, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        out.write(f"--- restarted at {time.strftime('%H:%M:%S')} ---\n".encode())
        out.flush()
        started = subprocess.Popen(
            was.argv,
            env=was.env,
            cwd=was.cwd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    pidfile.write_text(f"{started.pid}\n")
    return started


def _names(pidfile: Path, pid: int) -> bool:
    try:
        return pidfile.read_text().strip() == str(pid)
    except OSError:
        return False


def _supervise(
    started: subprocess.Popen[bytes],
    was: Recorded,
    pidfile: Path,
    log: Path,
    restart_sec: float | None,
) -> None:
    while True:
        code = started.wait()
        if restart_sec is None or code <= 0:
            return
        time.sleep(restart_sec)
        if not _names(pidfile, started.pid):  # stopped, or restarted by someone else
            return
        with log.open("ab") as out:
            out.write(f"--- exited with status {code}; starting again ---\n".encode())
        started = _start(was, pidfile, log)
