"""The API-server fake's HTTP side: the routes of the Kubernetes API the driver and the dev
tools use, answered from a `Store` as kube-apiserver answers them.

Routes (resource.k8s.io/v1 and core/v1):

    GET  /apis/resource.k8s.io                                  discovery of the group
    GET  /apis/resource.k8s.io/v1/resourceslices                list (fieldSelector,
                                                                labelSelector), watch
    POST /apis/resource.k8s.io/v1/resourceslices                create (generateName, dryRun)
    PUT, DELETE .../resourceslices/<name>                       resourceVersion / uid guarded
    GET  /apis/resource.k8s.io/v1/resourceclaims                list of every namespace
    GET, POST .../namespaces/<ns>/resourceclaims                list, create (status dropped)
    GET, PUT, DELETE .../namespaces/<ns>/resourceclaims/<name>  read, replace, delete
    PUT, PATCH .../namespaces/<ns>/resourceclaims/<name>/status replace; server-side apply of
                                                                status.devices
    GET, POST /api/v1/nodes, GET /api/v1/nodes/<name>           Nodes
    GET  /api/v1/pods                                           list of every namespace
                                                                (pods are put in the Store)
    POST /api/v1/namespaces/<ns>/events                         Events (kept in a list)

A stale resourceVersion or a failed precondition is 409 Conflict, an absent object 404, a body
that is not JSON (YAML for an apply) 400, an object missing a required field 422, each with a
`Status` body whose message says why. Server-side apply of a claim's status.devices merges as
the real server does for that list-map (`status_apply`): entries keyed by (driver, pool,
device, shareID), each owned by the field manager that applied it; without `force` an entry
another manager owns is refused with 409; `metadata.uid` is a precondition; entries for
devices the claim was not allocated, more than 8 conditions or more than 10 KiB of data are
refused (422). Slice watches stream from a resourceVersion (410 Gone for a version older than
the last `Store.compact()`). Optionally over TLS, recording each request's bearer token and
client certificate name.
"""

from __future__ import annotations

import json
import secrets
import select
import socket
import ssl
import time
import traceback
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlparse

import yaml

from dracpu.dev.apiserver.store import Object, Store, status

GROUP = "/apis/resource.k8s.io"
SLICES = f"{GROUP}/v1/resourceslices"
CLAIMS = f"{GROUP}/v1/resourceclaims"
# kube-apiserver's name generator (k8s.io/apiserver pkg/storage/names): the prefix cut to 58
# characters, then 5 characters of this alphabet.
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


class BadRequest(Exception):
    """A request the fake refuses: (code, reason, message) of its Status answer."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.answer = (code, reason, message)


def _generated(prefix: str) -> str:
    return prefix[:58] + "".join(secrets.choice(_SUFFIX_ALPHABET) for _ in range(5))


def _selector(text: str) -> list[tuple[str, bool, str]]:
    """`a=b,c==d,e!=f` as (key, equal, value) terms; set-based operators are not served."""
    terms: list[tuple[str, bool, str]] = []
    for term in filter(None, text.split(",")):
        unequal = "!=" in term
        key, sep, value = term.replace("!=", "=").replace("==", "=").partition("=")
        if not sep or key.endswith("!") or not key.strip():
            raise BadRequest(400, "BadRequest", f"unable to parse requirement: {term!r}: only "
                             "=, == and != are served")  # fmt: skip
        terms.append((key.strip(), not unequal, value.strip()))
    return terms


def _field(obj: Object, path: str) -> Any:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _matcher(query: dict[str, list[str]]) -> Callable[[Object], bool]:
    fields = _selector(query.get("fieldSelector", [""])[0])
    labels = _selector(query.get("labelSelector", [""])[0])

    def matches(obj: Object) -> bool:
        found = (obj.get("metadata") or {}).get("labels") or {}
        return all((str(_field(obj, k)) == v) == equal for k, equal, v in fields) and all(
            (found.get(k) == v) == equal for k, equal, v in labels
        )

    return matches


def _stale(current: Object, sent: Object) -> bool:
    """A write carrying a resourceVersion other than the stored one (none: unconditional)."""
    version = (sent.get("metadata") or {}).get("resourceVersion")
    return bool(version) and str(version) != current["metadata"]["resourceVersion"]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # chunked watch streams
    # Headers and body go out in separate writes: with Nagle's algorithm on, the body waits for
    # the client's delayed ACK of the headers (40 ms on Linux) on every kept-alive request.
    disable_nagle_algorithm = True
    store: Store
    _raw: bytes  # the request body as received
    _reply: tuple[int, bytes] | None  # status and body, written once the lock is released

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, code: int, body: Object) -> None:
        self._reply = (code, json.dumps(body).encode())

    def _body(self) -> Object:
        """The request's JSON object; 400 when it is not one."""
        try:
            body = json.loads(self._raw or b"{}")
        except ValueError as exc:
            raise BadRequest(400, "BadRequest", f"json parse error: {exc}") from None
        if not isinstance(body, dict):
            raise BadRequest(400, "BadRequest", "the body is not a JSON object")
        return body

    def _object(self, kind: str) -> Object:
        """A body to store: a JSON object with a metadata mapping (422 otherwise)."""
        obj = self._body()
        if not isinstance(obj.get("metadata") or {}, dict):
            raise BadRequest(422, "Invalid", f"{kind}: metadata: Invalid value: expected an "
                             "object")  # fmt: skip
        obj["metadata"] = dict(obj.get("metadata") or {})
        return obj

    def _route(self, method: str) -> None:
        # Socket I/O never waits with the lock held: the client may run on the event loop of a
        # test that takes the lock itself. The request body is read first, the reply written after.
        self._raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self._reply = None
        with self.store.lock:
            try:
                self._handle(method)
            except BadRequest as refused:
                self._send(refused.answer[0], status(*refused.answer))
            except Exception as exc:  # a bug in the fake: answered, and the fake keeps serving
                traceback.print_exc()
                self._send(500, status(500, "InternalError", f"{type(exc).__name__}: {exc}"))
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
        path = url.path.rstrip("/")
        parts = path.strip("/").split("/")
        query = parse_qs(url.query)
        s = self.store
        s.log_request(method, self.path, self.headers.get("Authorization", ""), self._peer_name())
        if s.require_token and self.headers.get("Authorization") != s.require_token:
            return self._send(401, status(401, "Unauthorized", "Unauthorized"))
        if method == "GET" and path == GROUP:
            return self._discovery()
        if path == CLAIMS and method == "GET":
            return self._list("ResourceClaimList", list(s.claims.values()), query)
        if path.startswith(f"{GROUP}/v1/namespaces/") and len(parts) >= 6 \
                and parts[5] == "resourceclaims":  # fmt: skip
            return self._claims(method, parts[4], parts[6:], query)
        if path.startswith("/api/v1/namespaces/") and len(parts) == 5 and parts[4] == "events":
            if method != "POST":
                return self._no_route(method, path)
            if s.refuse_events is not None:
                return self._send(s.refuse_events[0], status(*s.refuse_events))
            event = self._object("Event")
            event["metadata"].update(uid=str(uuid.uuid4()), namespace=parts[3])
            s.pod_events.append(s.stamp(event))
            return self._send(201, event)
        if path == "/api/v1/pods" and method == "GET":
            return self._list("PodList", list(s.pods.values()), query)
        if path == "/api/v1/nodes" or path.startswith("/api/v1/nodes/"):
            return self._nodes(method, parts[3:], query)
        if path == SLICES or path.startswith(SLICES + "/"):
            return self._slices(method, parts[4:], query)
        return self._no_route(method, path)

    def _no_route(self, method: str, path: str) -> None:
        return self._send(404, status(404, "NotFound", f"the server could not find the "
                                      f"requested resource ({method} {path})"))  # fmt: skip

    def _list(self, kind: str, items: list[Object], query: dict[str, list[str]]) -> None:
        matches = _matcher(query)
        self._send(200, {
            "kind": kind,
            "apiVersion": "v1" if kind in ("NodeList", "PodList") else "resource.k8s.io/v1",
            "items": [obj for obj in items if matches(obj)],
            "metadata": {"resourceVersion": str(self.store.version)},
        })  # fmt: skip

    def _discovery(self) -> None:
        versions = self.store.resource_versions
        if not versions:
            return self._send(404, status(404, "NotFound", "the server could not find the "
                                          "requested resource"))  # fmt: skip
        listed = [{"groupVersion": f"resource.k8s.io/{v}", "version": v} for v in versions]
        return self._send(200, {"kind": "APIGroup", "apiVersion": "v1",
                                "name": "resource.k8s.io", "versions": listed,
                                "preferredVersion": listed[-1]})  # fmt: skip

    def _nodes(self, method: str, rest: list[str], query: dict[str, list[str]]) -> None:
        s = self.store
        if not rest and method == "GET":
            return self._list("NodeList", list(s.nodes.values()), query)
        if not rest and method == "POST":
            node = self._object("Node")
            name = node["metadata"].get("name")
            if not name:
                raise BadRequest(422, "Invalid", "Node: metadata.name: Required value")
            if name in s.nodes:
                raise BadRequest(409, "AlreadyExists", f'nodes "{name}" already exists')
            # A uid given is kept (the real server assigns its own): a test names the Node's.
            node["metadata"].setdefault("uid", str(uuid.uuid4()))
            s.nodes[name] = s.stamp(node)
            return self._send(201, node)
        if len(rest) == 1 and method == "GET":
            if rest[0] in s.nodes:
                return self._send(200, s.nodes[rest[0]])
            return self._send(404, status(404, "NotFound", f'nodes "{rest[0]}" not found'))
        return self._no_route(method, "/api/v1/nodes/" + "/".join(rest))

    def _claims(
        self, method: str, namespace: str, rest: list[str], query: dict[str, list[str]]
    ) -> None:
        s = self.store
        if not rest:
            if method == "GET":
                items = [c for (ns, _), c in s.claims.items() if ns == namespace]
                return self._list("ResourceClaimList", items, query)
            if method == "POST":
                return self._create_claim(namespace)
            return self._no_route(method, f"resourceclaims in {namespace}")
        key = (namespace, rest[0])
        what = f'resourceclaims.resource.k8s.io "{key[1]}"'
        if method == "PATCH" and len(rest) == 2 and rest[1] == "status":
            return self._patch_status(key, query)
        if len(rest) > 2 or (len(rest) == 2 and rest[1] != "status"):
            return self._no_route(method, "resourceclaims/" + "/".join(rest))
        current = s.claims.get(key)
        if current is None:
            return self._send(404, status(404, "NotFound", f"{what} not found"))
        if method == "GET" and len(rest) == 1:
            return self._send(200, current)
        if method == "PUT":
            sent = self._object("ResourceClaim")
            if sent["metadata"].get("name", key[1]) != key[1]:
                raise BadRequest(
                    400,
                    "BadRequest",
                    f"the name of the object does not match the name on the URL ({key[1]})",
                )
            if _stale(current, sent):
                raise BadRequest(409, "Conflict", f"Operation cannot be fulfilled on {what}: "
                                 "the object has been modified; please apply your changes to "
                                 "the latest version and try again")  # fmt: skip
            # The main resource keeps the stored status; /status keeps the stored rest.
            if len(rest) == 2:
                replaced = {**current, "status": sent.get("status") or {}}
                replaced["metadata"] = dict(current["metadata"])
            else:
                replaced = {**sent, "status": current.get("status") or {}}
                replaced["metadata"] = {
                    **sent["metadata"],
                    "name": key[1],
                    "namespace": namespace,
                    "uid": current["metadata"]["uid"],
                }
            s.claims[key] = s.stamp(replaced)
            return self._send(200, replaced)
        if method == "DELETE" and len(rest) == 1:
            self._check_preconditions(current, what)
            gone = s.forget_claim(key)
            return self._send(200, gone)
        return self._no_route(method, "resourceclaims/" + "/".join(rest))

    def _create_claim(self, namespace: str) -> None:
        s = self.store
        claim = self._object("ResourceClaim")
        meta = claim["metadata"]
        name = meta.get("name") or (_generated(meta["generateName"])
                                    if meta.get("generateName") else "")  # fmt: skip
        if not name:
            raise BadRequest(422, "Invalid", "ResourceClaim.resource.k8s.io: metadata.name: "
                             "Required value: name or generateName is required")  # fmt: skip
        if meta.get("namespace", namespace) != namespace:
            raise BadRequest(400, "BadRequest", "the namespace of the provided object does not "
                             "match the namespace sent on the request")  # fmt: skip
        if not isinstance(claim.get("spec"), dict):
            raise BadRequest(422, "Invalid", f'ResourceClaim.resource.k8s.io "{name}" is '
                             "invalid: spec: Required value")  # fmt: skip
        if (namespace, name) in s.claims:
            raise BadRequest(409, "AlreadyExists", f'resourceclaims.resource.k8s.io "{name}" '
                             "already exists")  # fmt: skip
        meta.pop("generateName", None)
        # A uid given is kept (the real server assigns its own): tests and `dracpu dev claim`
        # name the claim's UID the kubelet will be asked to prepare.
        meta.update(name=name, namespace=namespace, uid=meta.get("uid") or str(uuid.uuid4()))
        meta.pop("resourceVersion", None)
        claim.setdefault("apiVersion", "resource.k8s.io/v1")
        claim.setdefault("kind", "ResourceClaim")
        claim["status"] = {}  # written through /status only, as the real server does
        s.claims[(namespace, name)] = s.stamp(claim)
        return self._send(201, claim)

    def _check_preconditions(self, current: Object, what: str) -> None:
        pre = self._body().get("preconditions") or {}
        meta = current["metadata"]
        for field in ("uid", "resourceVersion"):
            if pre.get(field, meta[field]) != meta[field]:
                raise BadRequest(
                    409,
                    "Conflict",
                    f"Operation cannot be fulfilled on {what}: "
                    f"Precondition failed: {field} in precondition: "
                    f"{pre[field]}, {field} in object meta: {meta[field]}",
                )

    def _slices(self, method: str, rest: list[str], query: dict[str, list[str]]) -> None:
        s = self.store
        if not rest and method == "GET":
            if query.get("watch", [""])[0].lower() in ("true", "1"):
                return self._watch(query, _matcher(query))
            return self._list("ResourceSliceList", list(s.slices.values()), query)
        if not rest and method == "POST":
            obj = self._object("ResourceSlice")
            self._gated(obj)
            meta = obj["metadata"]
            if not meta.get("name") and not meta.get("generateName"):
                raise BadRequest(422, "Invalid", "ResourceSlice.resource.k8s.io: metadata.name: "
                                 "Required value: name or generateName is required")  # fmt: skip
            name = meta.get("name") or _generated(meta.pop("generateName"))
            meta.update(name=name, uid=str(uuid.uuid4()))
            if query.get("dryRun"):
                return self._send(201, obj)  # answered, never stored
            if name in s.slices:
                raise BadRequest(409, "AlreadyExists", f'resourceslices.resource.k8s.io "{name}" '
                                 "already exists")  # fmt: skip
            s.slices[name] = s.stamp(obj)
            s.record("ADDED", obj)
            return self._send(201, obj)
        if len(rest) != 1:
            return self._no_route(method, SLICES + "/" + "/".join(rest))
        name = rest[0]
        what = f'resourceslices.resource.k8s.io "{name}"'
        current = s.slices.get(name)
        if current is None:
            return self._send(404, status(404, "NotFound", f"{what} not found"))
        if method == "GET":
            return self._send(200, current)
        if method == "PUT":
            obj = self._object("ResourceSlice")
            self._gated(obj)
            if obj["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
                raise BadRequest(409, "Conflict", f"Operation cannot be fulfilled on {what}: "
                                 "the object has been modified; please apply your changes to "
                                 "the latest version and try again")  # fmt: skip
            obj["metadata"]["uid"] = current["metadata"]["uid"]
            s.slices[name] = s.stamp(obj)
            s.record("MODIFIED", obj)
            return self._send(200, obj)
        if method == "DELETE":
            self._check_preconditions(current, what)
            del s.slices[name]
            s.stamp(current)
            s.record("DELETED", current)
            return self._send(200, status(200, "", "deleted") | {"status": "Success"})
        return self._no_route(method, f"{SLICES}/{name}")

    def _patch_status(self, key: tuple[str, str], query: dict[str, list[str]]) -> None:
        """PATCH .../resourceclaims/<name>/status as the real server answers an apply."""
        s = self.store
        if self.headers.get("Content-Type") != "application/apply-patch+yaml":
            return self._send(415, status(415, "UnsupportedMediaType", "the body of the "
                                          "request was in an unknown format"))  # fmt: skip
        manager = query.get("fieldManager", [""])[0]
        if not manager:
            return self._send(422, status(422, "Invalid", "PatchOptions.meta.k8s.io is "
                                          "invalid: fieldManager: Required value"))  # fmt: skip
        if key not in s.claims:
            return self._send(404, status(404, "NotFound", f'resourceclaims.resource.k8s.io '
                                          f'"{key[1]}" not found'))  # fmt: skip
        if s.fail_status > 0:
            s.fail_status -= 1
            return self._send(500, status(500, "InternalError", "etcdserver: request timed out"))
        try:
            body = yaml.safe_load(self._raw) or {}
        except yaml.YAMLError as exc:
            raise BadRequest(400, "BadRequest", f"error decoding YAML: {exc}") from None
        if not isinstance(body, dict) or not isinstance(body.get("status") or {}, dict):
            raise BadRequest(400, "BadRequest", "the apply configuration is not an object")
        uid = (body.get("metadata") or {}).get("uid")
        stored_uid = s.claims[key]["metadata"].get("uid")
        if uid and uid != stored_uid and s.uid_as_invalid:
            return self._send(422, status(422, "Invalid", f'ResourceClaim.resource.k8s.io '
                                          f'"{key[1]}" is invalid: metadata.uid: Invalid '
                                          f'value: "{uid}": field is immutable'))  # fmt: skip
        if uid and uid != stored_uid:
            return self._send(409, status(409, "Conflict", "Operation cannot be fulfilled on "
                                          f'resourceclaims.resource.k8s.io "{key[1]}": '
                                          f"Precondition failed: UID in precondition: {uid}, "
                                          f"UID in object meta: {stored_uid}"))  # fmt: skip
        devices = (body.get("status") or {}).get("devices") or []
        if not isinstance(devices, list):
            raise BadRequest(422, "Invalid", "status.devices: Invalid value: expected a list")
        force = query.get("force", [""])[0] == "true"
        code, answer = s.apply_status(key, manager, list(devices), force)
        return self._send(code, answer)

    def _peer_name(self) -> str:
        if not isinstance(self.connection, ssl.SSLSocket):
            return ""
        peer: dict[str, Any] = dict(self.connection.getpeercert() or {})
        subject: tuple[tuple[tuple[str, str], ...], ...] = peer.get("subject", ())
        names = [v for rdn in subject for k, v in rdn if k == "commonName"]
        return names[0] if names else ""

    def _client_gone(self) -> bool:
        """The client closed its end of the watch (EOF while we wait for events)."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            if not readable:
                return False
            connection: socket.socket = self.connection
            if isinstance(connection, ssl.SSLSocket):
                return connection.recv(1) == b""
            return connection.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True

    def _gated(self, obj: Object) -> None:
        """Apply the store's missing gates to a slice being written (lock held)."""
        for device in (obj.get("spec") or {}).get("devices") or []:
            for name, refusal in self.store.refuse.items():
                if name in json.dumps(device):
                    raise BadRequest(*refusal)
            for name in self.store.drop_device_fields:
                device.pop(name, None)

    def _watch(self, query: dict[str, list[str]], matches: Callable[[Object], bool]) -> None:
        """Stream slice events after resourceVersion until timeoutSeconds (lock held)."""
        s = self.store
        since = int(query.get("resourceVersion", ["0"])[0] or 0)
        deadline = time.monotonic() + float(query.get("timeoutSeconds", ["5"])[0])
        if since < s.compacted and s.gone_as_status:
            return self._send(410, status(410, "Gone", f"too old resource version: {since}"))

        def line(body: Object) -> None:
            data = json.dumps(body).encode() + b"\n"
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        gone = None
        if since < s.compacted:
            gone = status(410, "Expired", f"too old resource version: {since} ({s.compacted})")
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
