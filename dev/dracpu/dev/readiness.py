"""Is a process ready? Its gRPC health says SERVING, or its HTTP endpoint answers 200 (for the
API-server fake: the one its kubeconfig names)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import httpx

from dracpu.core.errors import DracpuError
from dracpu.core.rpc import check_health


@dataclass(frozen=True)
class Readiness:
    """How to tell a process is ready: gRPC health on a unix socket, or an HTTP GET (of a URL,
    or of a path of the server a kubeconfig names, once the kubeconfig is written)."""

    grpc_socket: Path | None = None
    http_url: str | None = None
    kubeconfig: Path | None = None
    # Any health answer will do: for a service whose SERVING waits on an outside peer
    # (a real runtime or kubelet) that may come later.
    any_status: bool = False

    def describe(self) -> str:
        if self.grpc_socket is not None:
            if self.any_status:
                return f"any gRPC health answer on {self.grpc_socket}"
            return f"gRPC health SERVING on {self.grpc_socket}"
        if self.kubeconfig is not None:
            return f"HTTP 200 from the server of {self.kubeconfig}{self.http_url or ''}"
        return f"HTTP 200 from {self.http_url}"


async def is_ready(readiness: Readiness, timeout: float = 1.0) -> bool:
    if readiness.grpc_socket is not None:
        if not readiness.grpc_socket.is_socket():
            return False
        try:
            status = await check_health(readiness.grpc_socket, timeout=timeout)
        except DracpuError:
            return False
        return readiness.any_status or status == "SERVING"
    url = readiness.http_url
    if readiness.kubeconfig is not None:
        from dracpu.dev.apiserver.client import server_of

        try:
            url = server_of(readiness.kubeconfig) + (url or "")
        except DracpuError:
            return False  # not written yet
    if url is not None:
        try:
            async with httpx.AsyncClient(timeout=timeout) as client:
                reply = await client.get(url)
        except httpx.HTTPError:
            return False
        return reply.status_code == 200
    return True
