"""A minimal gRPC process for supervisor tests: serves gRPC health on a unix socket the way
every dracpu service does (dracpu.core.rpc.start_server), and can misbehave on request."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from pathlib import Path

from dracpu.core.rpc import start_server


async def serve(args: argparse.Namespace) -> int:
    if args.exit_code is not None:
        print(f"toy: refusing to start: exit {args.exit_code}", file=sys.stderr, flush=True)
        return int(args.exit_code)
    server, health = await start_server(
        args.socket, lambda _server: None, service="toy", api_version="v1"
    )
    if not args.never_ready:
        await health.set(True)
    print(f"toy: serving on {args.socket}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    if args.ignore_sigterm:
        loop.add_signal_handler(signal.SIGTERM, lambda: None)
    else:
        loop.add_signal_handler(signal.SIGTERM, stop.set)
    if args.started_file:
        with Path(args.started_file).open("a", encoding="utf-8") as handle:
            handle.write(f"{args.socket}\n")
    await stop.wait()
    await server.stop(grace=0.5)
    Path(args.socket).unlink(missing_ok=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--socket", required=True)
    parser.add_argument("--exit-code", type=int)
    parser.add_argument("--never-ready", action="store_true")
    parser.add_argument("--ignore-sigterm", action="store_true")
    parser.add_argument("--started-file", help="append the socket path here once started")
    return asyncio.run(serve(parser.parse_args()))


if __name__ == "__main__":
    raise SystemExit(main())
