"""A minimal Kubernetes API server on loopback for the paths the dra-plugin uses.

Stores ResourceClaims, Nodes and ResourceSlices in memory and implements what the real server
does for them that matters here: generateName, uid and resourceVersion, field selectors on
spec.driver / spec.nodeName, 409 Conflict on a stale resourceVersion or failed delete
preconditions, 404 Status objects, and watches of slices from a resourceVersion (410 Gone for
a version older than the last `compact()`). Server-side apply of a claim's status.devices on
the status subresource as the real server does it for that list-map (`dracpu.core.status_apply`,
the merge the cluster folder does too: entries keyed by (driver, pool, device, shareID), each
owned by the field manager that applied it; without `force` an entry another manager owns is
refused with 409); `metadata.uid` is a
precondition; entries for devices the claim was not allocated, more than 8 conditions or more
than 10 KiB of data are refused (422). Discovery of the resource.k8s.io group (its versions
settable), server-side dry runs of slice creates (answered, never stored) and Events created
in a namespace (kept in a list, or refused with a set answer). Optionally over TLS (a
server-side SSL context), recording each request's bearer token and client certificate name.
"""

from __future__ import annotations

import copy
import itertools
import json
import secrets
import select
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import yaml

from dracpu.core.errors import ConflictError
from dracpu.core.status_apply import DeviceKey, apply_devices, device_key

SLICES = "/apis/resource.k8s.io/v1/resourceslices"


class Store:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.claims: dict[tuple[str, str], dict[str, Any]] = {}
        self.nodes: dict[str, dict[str, Any]] = {}
        self.slices: dict[str, dict[str, Any]] = {}
        self.versions = itertools.count(1)
        self.version = 0
        self.requests: list[tuple[str, str]] = []
        # Per request: the Authorization header and the client certificate's common name.
        self.credentials: list[tuple[str, str]] = []
        self.open_watches = 0
        self.events: list[tuple[int, str, dict[str, Any]]] = []  # slices only
        self.compacted = 0
        self.changed = threading.Condition(self.lock)
        # Set when the server stops: open watches end, so no client thread waits on one.
        self.closed = False
        # Gates the real server may lack: a device field silently dropped on write, or writes
        # using a field refused with (code, reason, message).
        self.drop_device_fields: set[str] = set()
        self.refuse: dict[str, tuple[int, str, str]] = {}
        # status.devices: "on"; "dropped" (a gate off: the field silently discarded); "unknown"
        # (a server whose schema lacks it: the apply is refused naming the field).
        self.device_status = "on"
        # (namespace, name) -> entry key -> field manager owning that status.devices entry.
        self.status_owners: dict[tuple[str, str], dict[DeviceKey, str]] = {}
        # A claim's UID differing from the apply's: 409 on the precondition, or (True) the 422
        # kube-apiserver 1.37 answers for a server-side apply ("field is immutable").
        self.uid_as_invalid = False
        # Status applies answer 500 while this is positive (decremented per refusal).
        self.fail_status = 0
        # When set, requests without exactly this Authorization header get 401.
        self.require_token = ""
        # A watch from a compacted version: False streams an ERROR event with code 410 (the
        # watch cache's answer); True answers the request itself with 410 Gone (etcd's).
        self.gone_as_status = False
        # The versions /apis/resource.k8s.io lists; empty: the group is not served at all (404).
        self.resource_versions = ["v1beta1", "v1beta2", "v1"]
        # Events created (core/v1, any namespace), and the refusal (code, reason, message) that
        # answers an Event create when set.
        self.pod_events: list[dict[str, Any]] = []
        self.refuse_events: tuple[int, str, str] | None = None

    def stamp(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.version = next(self.versions)
        obj["metadata"]["resourceVersion"] = str(self.version)
        return obj

    def record(self, kind: str, obj: dict[str, Any]) -> None:
        """A slice event for watchers (call with the lock held, after stamp)."""
        self.events.append((self.version, kind, copy.deepcopy(obj)))
        self.changed.notify_all()

    def put_slice(self, obj: dict[str, Any], kind: str = "MODIFIED") -> None:
        """Store a slice as someone else would write it."""
        with self.lock:
            self.slices[obj["metadata"]["name"]] = self.stamp(obj)
            self.record(kind, obj)

    def remove_slice(self, name: str) -> None:
        """Delete a slice as someone else (the garbage collector) would."""
        with self.lock:
            obj = self.slices.pop(name)
            self.stamp(obj)
            self.record("DELETED", obj)

    def apply_status(
        self, key: tuple[str, str], manager: str, devices: list[dict[str, Any]], force: bool
    ) -> tuple[int, dict[str, Any]]:
        """Server-side apply of status.devices by `manager` (lock held): (code, body)."""
        claim = self.claims[key]
        if self.device_status == "unknown":
            return 500, _status(500, "InternalError", "failed to create typed patch object "
                                ".status.devices: field not declared in schema")  # fmt: skip
        allocation = (claim.get("status") or {}).get("allocation") or {}
        allocated = {device_key(r) for r in (allocation.get("devices") or {}).get("results") or []}
        for index, entry in enumerate(devices):
            where = f"status.devices[{index}]"
            if device_key(entry) not in allocated:
                return 422, _status(422, "Invalid", f"ResourceClaim.resource.k8s.io {key[1]!r} "
                                    f"is invalid: {where}: Invalid value: must be an allocated "
                                    "device in the claim")  # fmt: skip
            if len(entry.get("conditions") or []) > 8:
                return 422, _status(422, "Invalid", f"{where}.conditions: Too many: must have "
                                    "at most 8 items")  # fmt: skip
            if len(json.dumps(entry.get("data") or {}, separators=(",", ":"))) > 10 * 1024:
                return 422, _status(422, "Invalid", f"{where}.data: Too long")
        try:
            applied = apply_devices(
                (claim.get("status") or {}).get("devices") or [],
                self.status_owners.get(key, {}),
                manager,
                devices,
                force=force,
            )
        except ConflictError as exc:
            return 409, _status(409, "Conflict", str(exc))
        status = claim.setdefault("status", {})
        merged, self.status_owners[key] = applied.devices, applied.owners
        if self.device_status == "dropped":
            merged = []
            self.status_owners[key] = {}
        if merged:
            status["devices"] = merged
        else:
            status.pop("devices", None)
        self.stamp(claim)
        return 200, claim

    def compact(self) -> None:
        """Forget history: watches from older versions get 410 Gone."""
        with self.lock:
            self.compacted = self.version + 1  # even the newest version seen is gone
            self.version = next(self.versions)
            self.events.clear()


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
            "reason": reason, "message": message}  # fmt: skip


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # chunked watch streams
    store: Store
    _pending: dict[str, Any]  # the body of the slice write being handled
    _raw: bytes  # the request body as received
    _reply: tuple[int, bytes] | None  # status and body, written once the lock is released

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, code: int, body: dict[str, Any]) -> None:
        self._reply = (code, json.dumps(body).encode())

    def _body(self) -> dict[str, Any]:
        return json.loads(self._raw or b"{}")

    def _route(self, method: str) -> None:
        # Socket I/O never waits with the lock held: the client may run on the event loop of a
        # test that takes the lock itself. The request body is read first, the reply written after.
        self._raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self._reply = None
        with self.store.lock:
            self._handle(method)
        if self._reply is not None:
            code, data = self._reply
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    def _handle(self, method: str) -> None:
        """Route one request (lock held); _send sets the reply."""
        url = urlparse(self.path)
        parts = url.path.strip("/").split("/")
        s = self.store
        s.requests.append((method, self.path))
        s.credentials.append((self.headers.get("Authorization", ""), self._peer_name()))
        if s.require_token and self.headers.get("Authorization") != s.require_token:
            return self._send(401, _status(401, "Unauthorized", "Unauthorized"))
        if method == "GET" and url.path.startswith("/apis/resource.k8s.io/v1/namespaces/"):
            key = (parts[4], parts[6])
            if key in s.claims:
                return self._send(200, s.claims[key])
            return self._send(404, _status(404, "NotFound", f"resourceclaims {key[1]} not found"))
        if method == "PATCH" and url.path.startswith("/apis/resource.k8s.io/v1/namespaces/"):
            return self._patch_status(url, parts)
        if method == "GET" and url.path == "/apis/resource.k8s.io":
            return self._discovery()
        if method == "POST" and url.path.startswith("/api/v1/namespaces/") and len(parts) == 5 \
                and parts[4] == "events":  # fmt: skip
            if s.refuse_events is not None:
                return self._send(s.refuse_events[0], _status(*s.refuse_events))
            event = self._body()
            event["metadata"].update(uid=str(uuid.uuid4()), namespace=parts[3])
            s.pod_events.append(s.stamp(event))
            return self._send(201, event)
        if method == "GET" and url.path.startswith("/api/v1/nodes/"):
            if parts[3] in s.nodes:
                return self._send(200, s.nodes[parts[3]])
            return self._send(404, _status(404, "NotFound", "node not found"))
        if url.path == SLICES and method == "GET":
            query = parse_qs(url.query)
            selector = query.get("fieldSelector", [""])[0]
            wanted = dict(term.split("=", 1) for term in selector.split(",") if term)

            def matches(obj: dict[str, Any]) -> bool:
                spec = obj["spec"]
                return all(spec.get(k.removeprefix("spec.")) == v for k, v in wanted.items())

            if query.get("watch", [""])[0].lower() in ("true", "1"):
                return self._watch(query, matches)
            items = [obj for obj in s.slices.values() if matches(obj)]
            listed = {
                "kind": "ResourceSliceList",
                "apiVersion": "resource.k8s.io/v1",
                "items": items,
                "metadata": {"resourceVersion": str(s.version)},
            }
            return self._send(200, listed)
        if url.path.startswith(SLICES) and method in ("POST", "PUT"):
            obj = self._body()
            refused = self._gated(obj)
            if refused is not None:
                return self._send(refused[0], _status(*refused))
            self._pending = obj
        if url.path == SLICES and method == "POST" and parse_qs(url.query).get("dryRun"):
            obj = self._pending
            meta = obj["metadata"]
            meta.update(name=meta.get("name") or meta.pop("generateName") + "dryrun",
                        uid=str(uuid.uuid4()))  # fmt: skip
            return self._send(201, obj)
        if url.path == SLICES and method == "POST":
            obj = self._pending
            meta = obj["metadata"]
            name = meta.get("name") or meta.pop("generateName") + secrets.token_hex(3)[:5]
            meta.update(name=name, uid=str(uuid.uuid4()))
            s.slices[name] = s.stamp(obj)
            s.record("ADDED", obj)
            return self._send(201, obj)
        if url.path.startswith(SLICES + "/"):
            name = parts[4]
            current = s.slices.get(name)
            if current is None:
                return self._send(404, _status(404, "NotFound", f"{name} not found"))
            if method == "PUT":
                obj = self._pending
                if obj["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
                    return self._send(409, _status(409, "Conflict", "object was modified"))
                obj["metadata"]["uid"] = current["metadata"]["uid"]
                s.slices[name] = s.stamp(obj)
                s.record("MODIFIED", obj)
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
                s.stamp(current)
                s.record("DELETED", current)
                return self._send(200, _status(200, "", "deleted") | {"status": "Success"})
        return self._send(404, _status(404, "NotFound", f"no route {method} {url.path}"))

    def _discovery(self) -> None:
        versions = self.store.resource_versions
        if not versions:
            return self._send(404, _status(404, "NotFound", "the server could not find the "
                                           "requested resource"))  # fmt: skip
        listed = [{"groupVersion": f"resource.k8s.io/{v}", "version": v} for v in versions]
        return self._send(200, {"kind": "APIGroup", "apiVersion": "v1",
                                "name": "resource.k8s.io", "versions": listed,
                                "preferredVersion": listed[-1]})  # fmt: skip

    def _patch_status(self, url: Any, parts: list[str]) -> None:
        """PATCH .../resourceclaims/<name>/status as the real server answers an apply."""
        s = self.store
        if len(parts) != 8 or parts[5] != "resourceclaims" or parts[7] != "status":
            return self._send(404, _status(404, "NotFound", "the server could not find the "
                                           "requested resource"))  # fmt: skip
        if self.headers.get("Content-Type") != "application/apply-patch+yaml":
            return self._send(415, _status(415, "UnsupportedMediaType", "the body of the "
                                           "request was in an unknown format"))  # fmt: skip
        query = parse_qs(url.query)
        manager = query.get("fieldManager", [""])[0]
        if not manager:
            return self._send(422, _status(422, "Invalid", "PatchOptions.meta.k8s.io is "
                                           "invalid: fieldManager: Required value"))  # fmt: skip
        key = (parts[4], parts[6])
        if key not in s.claims:
            return self._send(404, _status(404, "NotFound", f'resourceclaims.resource.k8s.io '
                                           f'"{key[1]}" not found'))  # fmt: skip
        if s.fail_status > 0:
            s.fail_status -= 1
            return self._send(500, _status(500, "InternalError", "etcdserver: request timed out"))
        body = yaml.safe_load(self._raw) or {}
        uid = (body.get("metadata") or {}).get("uid")
        stored_uid = s.claims[key]["metadata"].get("uid")
        if uid and uid != stored_uid and s.uid_as_invalid:
            return self._send(422, _status(422, "Invalid", f'ResourceClaim.resource.k8s.io '
                                           f'"{key[1]}" is invalid: metadata.uid: Invalid '
                                           f'value: "{uid}": field is immutable'))  # fmt: skip
        if uid and uid != stored_uid:
            return self._send(409, _status(409, "Conflict", "Operation cannot be fulfilled on "
                                           f'resourceclaims.resource.k8s.io "{key[1]}": '
                                           f"Precondition failed: UID in precondition: {uid}, "
                                           f"UID in object meta: {stored_uid}"))  # fmt: skip
        devices = list((body.get("status") or {}).get("devices") or [])
        force = query.get("force", [""])[0] == "true"
        code, answer = s.apply_status(key, manager, devices, force)
        return self._send(code, answer)

    def _peer_name(self) -> str:
        if not isinstance(self.connection, ssl.SSLSocket):
            return ""
        peer = self.connection.getpeercert() or {}
        names = [v for rdn in peer.get("subject", ()) for k, v in rdn if k == "commonName"]
        return names[0] if names else ""

    def _client_gone(self) -> bool:
        """The client closed its end of the watch (EOF while we wait for events)."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            if not readable:
                return False
            if isinstance(self.connection, ssl.SSLSocket):
                return self.connection.recv(1) == b""
            return self.connection.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True

    def _gated(self, obj: dict[str, Any]) -> tuple[int, str, str] | None:
        """Apply the store's missing gates to a slice being written (lock held)."""
        for device in obj.get("spec", {}).get("devices") or []:
            for name, refusal in self.store.refuse.items():
                if name in json.dumps(device):
                    return refusal
            for name in self.store.drop_device_fields:
                device.pop(name, None)
        return None

    def _watch(self, query: dict[str, list[str]], matches: Any) -> None:
        """Stream slice events after resourceVersion until timeoutSeconds (lock held)."""
        s = self.store
        since = int(query.get("resourceVersion", ["0"])[0] or 0)
        deadline = time.monotonic() + float(query.get("timeoutSeconds", ["5"])[0])
        if since < s.compacted and s.gone_as_status:
            return self._send(410, _status(410, "Gone", f"too old resource version: {since}"))

        def line(body: dict[str, Any]) -> None:
            data = json.dumps(body).encode() + b"\n"
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        gone = None
        if since < s.compacted:
            gone = _status(410, "Expired", f"too old resource version: {since} ({s.compacted})")
        s.lock.release()  # socket I/O without the lock (see _route)
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")  # as the real server streams one
            self.end_headers()
            if gone is not None:
                line({"type": "ERROR", "object": gone})
                self.wfile.write(b"0\r\n\r\n")
        except OSError:
            return None  # the client went away
        finally:
            s.lock.acquire()
        if gone is not None:
            return None
        s.open_watches += 1
        try:
            while time.monotonic() < deadline and not s.closed:
                if self._client_gone():
                    return None
                due = [(kind, obj) for version, kind, obj in s.events
                       if version > since and matches(obj)]  # fmt: skip
                since = s.version
                s.lock.release()  # written without the lock (see _route)
                try:
                    for kind, obj in due:
                        line({"type": kind, "object": obj})
                finally:
                    s.lock.acquire()
                if since == s.version:
                    s.changed.wait(timeout=max(0.0, min(0.5, deadline - time.monotonic())))
            s.lock.release()
            try:
                self.wfile.write(b"0\r\n\r\n")
            finally:
                s.lock.acquire()
        except OSError:
            pass  # the client went away
        finally:
            s.open_watches -= 1
        return None

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")

    def do_PUT(self) -> None:
        self._route("PUT")

    def do_DELETE(self) -> None:
        self._route("DELETE")

    def do_PATCH(self) -> None:
        self._route("PATCH")


@contextmanager
def fake_apiserver(
    directory: Path, tls: ssl.SSLContext | None = None
) -> Iterator[tuple[Store, Path]]:
    """Serve on 127.0.0.1 (https with `tls`); yields the store and a kubeconfig file pointing
    at it (with no CA: tests that use TLS write their own)."""
    store = Store()
    handler = type("BoundHandler", (Handler,), {"store": store})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    scheme = "https" if tls is not None else "http"
    kubeconfig = directory / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": f"{scheme}://{host}:{port}"}}],
        "users": [{"name": "fake", "user": {}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
    }))  # fmt: skip
    try:
        yield store, kubeconfig
    finally:
        with store.lock:
            store.closed = True
            store.changed.notify_all()
        server.shutdown()
        server.server_close()
