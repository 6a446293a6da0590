"""Drives the Go NRI runtime harness (tests/peers/nri, built into .tools/bin by
tools/bootstrap-peers.sh): the genuine containerd/nri pkg/adaptation on a temporary socket."""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT / ".tools" / "bin"


@dataclass(frozen=True)
class PeerVersion:
    binary: str
    nri: str  # the pinned containerd/nri release it is built from
    runtime_name: str
    runtime_version: str  # a runtime release that ships that NRI
    dedicated_remove: bool
    unsolicited_by_default: bool


PEERS = [
    PeerVersion("nri-runtime-latest", "v0.12.5", "containerd", "v2.4.0", True, True),
    PeerVersion("nri-runtime-v0.8.0", "v0.8.0", "containerd", "v2.0.0", False, False),
]


def missing_reason(peer: PeerVersion) -> str | None:
    path = TOOLS / peer.binary
    if not path.exists():
        return (
            f"{path} is not built (Go absent? run tools/bootstrap-peers.sh): "
            "the real NRI runtime peer test cannot run"
        )
    return None


class GoRuntime:
    """One harness process; `call` sends a command line and reads the answer line."""

    def __init__(self, process: asyncio.subprocess.Process, log: Path) -> None:
        self._process = process
        self._log = log
        self._lock = asyncio.Lock()

    @classmethod
    async def start(
        cls, peer: PeerVersion, socket: Path, log: Path, *, listen: bool = True
    ) -> GoRuntime:
        """Run the harness; with `listen` it also opens the NRI socket at once."""
        out = log.open("wb")
        process = await asyncio.create_subprocess_exec(
            str(TOOLS / peer.binary),
            str(socket),
            peer.runtime_name,
            peer.runtime_version,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=out,
            limit=64 << 20,
        )
        out.close()
        runtime = cls(process, log)
        if listen:
            await runtime.ok("start")
        return runtime

    async def call(self, op: str, timeout: float = 20.0, **fields: Any) -> dict[str, Any]:
        assert self._process.stdin is not None and self._process.stdout is not None
        async with self._lock:
            self._process.stdin.write((json.dumps({"op": op, **fields}) + "\n").encode())
            await self._process.stdin.drain()
            line = await asyncio.wait_for(self._process.stdout.readline(), timeout)
        if not line:
            raise AssertionError(f"harness exited: {self._log.read_text()[-3000:]}")
        answer: dict[str, Any] = json.loads(line)
        return answer

    async def ok(self, op: str, **fields: Any) -> dict[str, Any]:
        answer = await self.call(op, **fields)
        if not answer.get("ok"):
            raise AssertionError(f"{op} failed: {answer.get('error')}")
        return answer

    async def cpus(self) -> dict[str, str]:
        return dict((await self.ok("cpus")).get("cpus", {}))

    def log_text(self) -> str:
        return self._log.read_text(errors="replace")

    async def close(self) -> None:
        if self._process.returncode is None:
            with contextlib.suppress(AssertionError, TimeoutError, ConnectionError):
                await self.call("quit", timeout=5)
            if self._process.returncode is None:
                self._process.kill()
            await self._process.wait()
