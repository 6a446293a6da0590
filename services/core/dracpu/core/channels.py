"""Client channels to the services' unix sockets, with the reconnect backoff every client uses
and the caller's operation ID sent with every call (`dracpu.core.interceptors`)."""

from __future__ import annotations

import os

import grpc

from dracpu.core.interceptors import client_interceptors


def channel(socket_path: str | os.PathLike[str]) -> grpc.aio.Channel:
    """A client channel to a local service; gRPC reconnects with backoff by itself."""
    return grpc.aio.insecure_channel(
        f"unix://{os.fspath(socket_path)}",
        options=[
            ("grpc.initial_reconnect_backoff_ms", 100),
            ("grpc.max_reconnect_backoff_ms", 2000),
            ("grpc.enable_retries", 1),
        ],
        interceptors=client_interceptors(),
    )
