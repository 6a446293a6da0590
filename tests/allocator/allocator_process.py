"""Run the allocator (and the topology service) as real processes on temporary sockets."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from dracpu.core.errors import DracpuError
from dracpu.core.rpc import check_health

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


async def health_of(socket: Path) -> str:
    try:
        return await check_health(socket, timeout=0.5)
    except DracpuError:
        return "UNREACHABLE"


async def wait_for(
    socket: Path, status: str, process: subprocess.Popen[bytes], timeout: float = 20.0
) -> None:
    """Poll the health service until it reports `status` (or the process dies)."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(
                f"process exited with {process.returncode} while waiting for {status}"
            )
        last = await health_of(socket)
        if last == status:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{socket}: health {last}, wanted {status}")


def stop(process: subprocess.Popen[bytes], sig: int = signal.SIGTERM, timeout: float = 10.0) -> int:
    if process.poll() is None:
        process.send_signal(sig)
    return process.wait(timeout=timeout)
