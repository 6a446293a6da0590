"""`dracpu health`: one health check of a local service, for container probes.

The kubelet's built-in gRPC probe dials TCP only, and the services listen on unix sockets, so
the chart's `exec` probes run this command (its default `http` probes ask the services' own
probe listeners instead, dracpu.core.probes, which start no process). Exit 0 means healthy, 1
unhealthy (one line on stderr says why), 2 bad usage.

- `--socket PATH` asks the standard grpc.health.v1 service: healthy when SERVING.
- `--socket PATH --live` is healthy when the server answers at all, whatever its status: a
  service waiting for a restarting peer reports NOT_SERVING but must not be killed for it.
- `--url URL` GETs an HTTP endpoint (the api's /healthz or /readyz): healthy on a 2xx answer.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from dracpu.core.cli import ArgumentParser

EXIT_HEALTHY = 0
EXIT_UNHEALTHY = 1
PROG = "dracpu health"
SUMMARY = "check one service's health (container probes)"


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog=PROG, description="check the health of one dracpu service")
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--socket", metavar="PATH", help="unix socket of a gRPC service")
    target.add_argument("--url", metavar="URL", help="HTTP endpoint that answers 2xx when healthy")
    parser.add_argument(
        "--live",
        action="store_true",
        help="with --socket: healthy when the server answers, whatever its status",
    )
    parser.add_argument(
        "--timeout", type=float, default=3.0, metavar="SECONDS", help="give up after this long"
    )
    return parser


def check_grpc(socket: str, *, live: bool, timeout: float) -> str | None:
    """None when healthy, else why not.

    A blocking client on purpose: the probe runs every few seconds in every container, and
    skipping asyncio and the service plumbing roughly halves its start-up cost.
    """
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(f"unix://{socket}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=timeout)
        except grpc.RpcError as exc:
            code = exc.code() if isinstance(exc, grpc.Call) else None
            detail = exc.details() if isinstance(exc, grpc.Call) else str(exc)
            return f"health of {socket}: {detail or (code.name if code else 'failed')}"
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    if live or status == "SERVING":
        return None
    return f"{socket}: {status}"


def check_http(url: str, *, timeout: float) -> str | None:
    """None when healthy, else why not."""
    if not url.startswith(("http://", "https://")):
        return f"{url}: not an http(s) URL"
    import urllib.error  # here: loads ssl, which gRPC probes do not need
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=timeout) as reply:
            status = int(reply.status)
    except urllib.error.HTTPError as exc:
        return f"{url}: HTTP {exc.code}"
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        return f"{url}: {reason}"
    return None if 200 <= status < 300 else f"{url}: HTTP {status}"


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.timeout <= 0:
        print(f"{PROG}: error: --timeout must be positive", file=sys.stderr)
        return 2
    if args.live and args.url:
        print(f"{PROG}: error: --live applies to --socket only", file=sys.stderr)
        return 2
    if args.socket:
        problem = check_grpc(args.socket, live=args.live, timeout=args.timeout)
    else:
        problem = check_http(args.url, timeout=args.timeout)
    if problem is None:
        return EXIT_HEALTHY
    print(f"{PROG}: unhealthy: {problem}", file=sys.stderr)
    return EXIT_UNHEALTHY
