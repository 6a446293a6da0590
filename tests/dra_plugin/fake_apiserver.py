"""A minimal Kubernetes API server on loopback for the paths the dra-plugin uses.

Stores ResourceClaims, Nodes and ResourceSlices in memory and implements what the real server
does for them that matters here: generateName, uid and resourceVersion, field selectors on
spec.driver / spec.nodeName, 409 Conflict on a stale resourceVersion or failed delete
preconditions, 404 Status objects.
"""

from __future__ import annotations

import itertools
import json
import secrets
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import yaml

SLICES = "/apis/resource.k8s.io/v1/resourceslices"


class Store:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.claims: dict[tuple[str, str], dict[str, Any]] = {}
        self.nodes: dict[str, dict[str, Any]] = {}
        self.slices: dict[str, dict[str, Any]] = {}
        self.versions = itertools.count(1)
        self.requests: list[tuple[str, str]] = []

    def stamp(self, obj: dict[str, Any]) -> dict[str, Any]:
        obj["metadata"]["resourceVersion"] = str(next(self.versions))
        return obj


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
            "reason": reason, "message": message}  # fmt: skip


class Handler(BaseHTTPRequestHandler):
    store: Store

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length", 0))
        return json.loads(self.rfile.read(length) or b"{}")

    def _route(self, method: str) -> None:
        url = urlparse(self.path)
        parts = url.path.strip("/").split("/")
        s = self.store
        with s.lock:
            s.requests.append((method, self.path))
            if method == "GET" and url.path.startswith("/apis/resource.k8s.io/v1/namespaces/"):
                key = (parts[4], parts[6])
                if key in s.claims:
                    return self._send(200, s.claims[key])
                return self._send(
                    404, _status(404, "NotFound", f"resourceclaims {key[1]} not found")
                )
            if method == "GET" and url.path.startswith("/api/v1/nodes/"):
                if parts[3] in s.nodes:
                    return self._send(200, s.nodes[parts[3]])
                return self._send(404, _status(404, "NotFound", "node not found"))
            if url.path == SLICES and method == "GET":
                selector = parse_qs(url.query).get("fieldSelector", [""])[0]
                wanted = dict(term.split("=", 1) for term in selector.split(",") if term)
                items = [
                    obj for obj in s.slices.values()
                    if all(obj["spec"].get(k.removeprefix("spec.")) == v for k, v in wanted.items())
                ]  # fmt: skip
                return self._send(200, {"kind": "ResourceSliceList", "apiVersion":
                                        "resource.k8s.io/v1", "items": items})  # fmt: skip
            if url.path == SLICES and method == "POST":
                obj = self._body()
                meta = obj["metadata"]
                name = meta.get("name") or meta.pop("generateName") + secrets.token_hex(3)[:5]
                meta.update(name=name, uid=str(uuid.uuid4()))
                s.slices[name] = s.stamp(obj)
                return self._send(201, obj)
            if url.path.startswith(SLICES + "/"):
                name = parts[4]
                current = s.slices.get(name)
                if current is None:
                    return self._send(404, _status(404, "NotFound", f"{name} not found"))
                if method == "PUT":
                    obj = self._body()
                    if (
                        obj["metadata"].get("resourceVersion")
                        != current["metadata"]["resourceVersion"]
                    ):
                        return self._send(409, _status(409, "Conflict", "object was modified"))
                    obj["metadata"]["uid"] = current["metadata"]["uid"]
                    s.slices[name] = s.stamp(obj)
                    return self._send(200, obj)
                if method == "DELETE":
                    pre = self._body().get("preconditions") or {}
                    meta = current["metadata"]
                    if (
                        pre.get("uid", meta["uid"]) != meta["uid"]
                        or pre.get("resourceVersion", meta["resourceVersion"])
                        != meta["resourceVersion"]
                    ):
                        return self._send(409, _status(409, "Conflict", "precondition failed"))
                    del s.slices[name]
                    return self._send(200, _status(200, "", "deleted") | {"status": "Success"})
            return self._send(404, _status(404, "NotFound", f"no route {method} {url.path}"))

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")

    def do_PUT(self) -> None:
        self._route("PUT")

    def do_DELETE(self) -> None:
        self._route("DELETE")


@contextmanager
def fake_apiserver(directory: Path) -> Iterator[tuple[Store, Path]]:
    """Serve on 127.0.0.1; yields the store and a kubeconfig file pointing at it."""
    store = Store()
    handler = type("BoundHandler", (Handler,), {"store": store})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    kubeconfig = directory / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": f"http://{host}:{port}"}}],
        "users": [{"name": "fake", "user": {}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
    }))  # fmt: skip
    try:
        yield store, kubeconfig
    finally:
        server.shutdown()
        server.server_close()
