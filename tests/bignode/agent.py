"""The big-node guest's agent: one long-lived Python process in the guest that pytest on the
host drives over qemu's forwarded TCP port (process starts cost 25-50x under emulation, so the
guest keeps this one and the processes it starts).

A request is one JSON line, the answer one JSON line on the same connection:
  {"op": "ping"}                                   -> {"ok": {"uptime": s, "cpus": n, ...}}
  {"op": "sh", "argv": [...], "timeout": s}        -> {"ok": {"rc": n, "stdout": "", "stderr": ""}}
  {"op": "call", "fn": "name", "kwargs": {...}}    -> {"ok": <what inguest.<name> returned>}
  {"op": "poweroff"}                               -> {"ok": true}, then the guest powers off
  {"op": "reboot"}                                 -> {"ok": true}, then the guest reboots (reset)
A failure answers {"error": "<type>: <message>"}. Connections are served at once, each
request in a thread of its own, so a sampler can read the kernel while a step runs.

Run as a script, so tests/bignode is first on its path; stage 2 (tools/bignode/stage2.sh)
starts it with tests/skew on PYTHONPATH for inguest's imports.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Any

import inguest


def _sh(argv: list[str], timeout: float) -> dict[str, Any]:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    return {"rc": done.returncode, "stdout": done.stdout, "stderr": done.stderr}


def ping() -> dict[str, Any]:
    """How the guest is: read from /proc in the event loop itself, so a ping is answered while
    every worker thread waits on a step."""
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    meminfo = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    return {
        "uptime": uptime,
        "cpus": os.cpu_count(),
        "load": Path("/proc/loadavg").read_text().split()[:3],
        "mem_available_mib": int(meminfo["MemAvailable"].split()[0]) // 1024,
    }


def handle(request: dict[str, Any], state: Path) -> Any:
    op = request.get("op")
    if op == "sh":
        return _sh([str(a) for a in request["argv"]], float(request.get("timeout", 120)))
    if op == "call":
        function = getattr(inguest, str(request["fn"]), None)
        if function is None or str(request["fn"]).startswith("_"):
            raise LookupError(f"inguest has no function {request['fn']!r}")
        return function(state=state, **request.get("kwargs", {}))
    raise ValueError(f"unknown op {op!r}")


async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, state: Path) -> None:
    try:
        while line := await reader.readline():
            request = json.loads(line)
            if request.get("op") == "poweroff":
                writer.write(b'{"ok": true}\n')
                await writer.drain()
                inguest.shutdown(state=state)
                os._exit(0)  # stage 2 powers the guest off when this process is gone
            if request.get("op") == "reboot":
                writer.write(b'{"ok": true}\n')
                await writer.drain()
                inguest.reboot(state=state)  # does not return
            try:
                if request.get("op") == "ping":
                    answer = {"ok": ping()}
                else:
                    answer = {"ok": await asyncio.to_thread(handle, request, state)}
            except Exception as exc:  # the host gets every failure as one line
                print(traceback.format_exc(), file=sys.stderr, flush=True)
                answer = {"error": f"{type(exc).__name__}: {exc}"}
            writer.write(json.dumps(answer).encode() + b"\n")
            await writer.drain()
    except (ConnectionError, json.JSONDecodeError):
        pass
    finally:
        writer.close()


async def main() -> None:
    parser = argparse.ArgumentParser(prog="agent.py")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--state", type=Path, required=True)
    args = parser.parse_args()
    server = await asyncio.start_server(
        lambda r, w: serve(r, w, args.state), "0.0.0.0", args.port, limit=1 << 24
    )
    print(f"agent: serving on :{args.port}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
