"""The Kubernetes API server as the dra-plugin's cluster, through the official client.

The calls the plugin makes: read a ResourceClaim and a Node; list, watch, create, replace and
delete this node's ResourceSlices; server-side apply of a claim's status.devices entries. Each
goes through the client's ApiClient (its configuration, authentication, TLS and connection
pool) as a raw request: plain dicts are sent and the server's JSON is decoded as it came, never
through the generated models, so a ResourceSlice or ResourceClaim keeps every field, including
those newer than the client. The client blocks: its calls run in a small thread pool owned
here, off the event loop. A watch is one streamed response read a line at a time in that pool;
closing or cancelling it shuts the socket down, so the reading thread ends at once. Every
error carries the server's own reason (the Status object's message), not only its code; a
401 reads the credentials again and retries once when they changed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import AsyncGenerator, Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from http import HTTPStatus
from typing import Any, TypeVar
from urllib.parse import quote, urlencode

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException
from kubernetes.client.rest import RESTResponse
from kubernetes.watch.watch import iter_resp_lines
from urllib3.exceptions import HTTPError as TransportError
from urllib3.util.retry import Retry

from dracpu.core.errors import (
    ConflictError,
    DracpuError,
    InvalidInputError,
    NotFoundError,
    UnavailableError,
)
from dracpu.core.log import get_logger
from dracpu.dra_plugin.cluster.api_access import APIAccess
from dracpu.dra_plugin.cluster.api_access import load as load_access
from dracpu.dra_plugin.cluster.objects import Object, WatchEvent, WatchExpiredError

log = get_logger(__name__)

RESOURCE_API = "/apis/resource.k8s.io/v1"
SLICES = f"{RESOURCE_API}/resourceslices"
CONNECT_TIMEOUT = 10.0
# A request the server has not answered by then is failed and retried by its caller (the
# publisher's next round, the kubelet's next prepare) rather than waited on for ever.
REQUEST_TIMEOUT = 60.0
# A watch is silent while nothing changes: it may read nothing until the server ends it.
WATCH_GRACE = 30.0
# urllib3's own retries, bounded: a connection refused or reset is tried twice more, a read
# that timed out (an idempotent GET) once; the callers retry the rest on their own schedule.
RETRIES = Retry(total=2, connect=2, read=1, redirect=0, status=0, other=0)
USER_AGENT = "dracpu-dra-plugin"
APPLY_PATCH = "application/apply-patch+yaml"
# The slice watch holds one thread while it is open; the others serve the publisher, the
# claim reads of NodePrepareResources and the status writer.
MAX_WORKERS = 4

T = TypeVar("T")


def server_message(body: Any) -> str:
    """The message of a Status object in a response body; "" when there is none."""
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if isinstance(body, str):
        try:
            body = json.loads(body)
        except ValueError:
            return " ".join(str(body).split())[:500]
    if isinstance(body, Mapping):
        return str(body.get("message") or "")
    return ""


def _error(status: int, reason: str, body: Any, what: str) -> DracpuError:
    detail = f"{what}: {status} {reason or _phrase(status)}".rstrip()
    message = server_message(body)
    if message:
        detail += f": {message}"
    if status == 404:
        return NotFoundError(detail)
    if status in (409, 412):
        return ConflictError(detail)
    if status in (400, 422):
        return InvalidInputError(detail)
    return UnavailableError(detail)


def api_error(exc: ApiException, what: str) -> DracpuError:
    """An ApiException as the project's error: its status, reason and the Status message of
    its body; status 0 is the client's own failure (TLS, an unusable request)."""
    if not exc.status:
        return _unreachable(Exception(exc.reason or exc), what)
    return _error(int(exc.status), str(exc.reason or ""), exc.body, what)


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


def _unreachable(exc: BaseException, what: str) -> UnavailableError:
    """Refused, reset, TLS, timeouts: the transport's own words, one line."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return UnavailableError(f"{what}: {text}")


def _selector(driver: str, node: str) -> str:
    return f"spec.driver={driver},spec.nodeName={node}"


def _decode(data: bytes | None, status: int, what: str) -> Object:
    try:
        decoded = json.loads(data or b"")
    except ValueError:
        decoded = None
    if not isinstance(decoded, dict):
        raise UnavailableError(f"{what}: the server answered {status} without a JSON object")
    return decoded


class KubernetesAPI:
    def __init__(self, kubeconfig: str = "", *, access: APIAccess | None = None) -> None:
        self.access = access or load_access(kubeconfig)
        self._client = self._new_client()
        self._lock = threading.Lock()  # replacing the client after new credentials
        self._pool = ThreadPoolExecutor(MAX_WORKERS, thread_name_prefix="dracpu-kube")
        self._streams: set[RESTResponse] = set()  # open watches, ended by aclose

    def _new_client(self) -> ApiClient:
        self.access.configuration.retries = RETRIES
        client = ApiClient(self.access.configuration)
        client.user_agent = USER_AGENT
        return client

    def describe(self) -> str:
        return "kubernetes"

    async def aclose(self) -> None:
        """End open watches and stop the pool without waiting on a request still in flight
        (each has its timeout)."""
        for stream in list(self._streams):
            _close(stream)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._client.close()
        self.access.close()

    async def _run(self, call: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, call)

    def _send(
        self,
        method: str,
        path: str,
        params: Mapping[str, str] | None,
        body: Mapping[str, Any] | None,
        content_type: str,
        timeout: tuple[float, float],
    ) -> RESTResponse:
        """One request (in a worker thread); a 401 reads the credentials again and, when they
        changed, sends it once more with the new ones."""
        client = self._client
        # Every reserved character escaped, "/" too (the client's own query encoding keeps it).
        target = f"{path}?{urlencode(params, quote_via=quote)}" if params else path
        for attempt in (1, 2):
            headers = {"Accept": "application/json"}
            if body is not None:
                headers["Content-Type"] = content_type or "application/json"
            method, url, headers, data, _ = client.param_serialize(
                method=method, resource_path=target,
                header_params=headers, body=dict(body) if body is not None else None,
                auth_settings=["BearerToken"],
            )  # fmt: skip
            response = client.call_api(method, url, headers, data, _request_timeout=timeout)
            if response.status != 401 or attempt == 2:
                return response
            with self._lock:
                if self._client is client and self.access.reload():
                    self._client = self._new_client()
                    log.info(2, "the API server refused our credentials; using the ones read "
                             "again", source=self.access.source)  # fmt: skip
                if self._client is client:
                    return response  # the same credentials: the 401 stands
                client = self._client
            response.response.drain_conn()
        raise AssertionError("unreachable")

    def _request(
        self,
        method: str,
        path: str,
        what: str,
        params: Mapping[str, str] | None,
        body: Mapping[str, Any] | None,
        content_type: str,
    ) -> Object:
        try:
            response = self._send(method, path, params, body, content_type,
                                  (CONNECT_TIMEOUT, REQUEST_TIMEOUT))  # fmt: skip
            data = response.read()
        except ApiException as exc:
            raise api_error(exc, what) from None
        except (TransportError, OSError) as exc:
            raise _unreachable(exc, what) from None
        if not 200 <= response.status <= 299:
            raise _error(response.status, str(response.reason or ""), data, what)
        return _decode(data, response.status, what)

    async def _call(
        self,
        method: str,
        path: str,
        what: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Mapping[str, Any] | None = None,
        content_type: str = "",
    ) -> Object:
        return await self._run(
            lambda: self._request(method, path, what, params, body, content_type)
        )

    async def get_claim(self, namespace: str, name: str) -> Object:
        return await self._call(
            "GET",
            f"{RESOURCE_API}/namespaces/{quote(namespace, safe='')}/resourceclaims/"
            f"{quote(name, safe='')}",
            f"retrieve claim {namespace}/{name}",
        )

    async def apply_claim_status(
        self, namespace: str, name: str, uid: str, manager: str, devices: Sequence[Object]
    ) -> Object:
        """Server-side apply of `status.devices` on the status subresource as `manager`,
        forced (the entries are ours whoever touched them). The UID is a precondition: a
        claim replaced under the same name answers 409. No entries removes ours."""
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace, "uid": uid},
            # Nothing at all rather than an empty list: the manager then owns no entry.
            "status": {"devices": list(devices)} if devices else {},
        }
        return await self._call(
            "PATCH",
            f"{RESOURCE_API}/namespaces/{quote(namespace, safe='')}/resourceclaims/"
            f"{quote(name, safe='')}/status",
            f"apply status of claim {namespace}/{name}",
            params={"fieldManager": manager, "force": "true"},
            body=body,
            content_type=APPLY_PATCH,  # JSON is YAML: the client sends the body as JSON text
        )

    async def node_uid(self, name: str) -> str | None:
        try:
            node = await self._call("GET", f"/api/v1/nodes/{quote(name, safe='')}",
                                    f"get node {name}")  # fmt: skip
        except NotFoundError:
            return None
        uid = (node.get("metadata") or {}).get("uid")
        return str(uid) if uid else None

    async def list_slices(self, driver: str, node: str) -> list[Object]:
        items, _ = await self.list_slices_at(driver, node)
        return items

    async def list_slices_at(self, driver: str, node: str) -> tuple[list[Object], str]:
        """This node's slices of `driver` and the list's resourceVersion to watch from."""
        result = await self._call(
            "GET", SLICES, "list resourceslices", params={"fieldSelector": _selector(driver, node)}
        )
        version = str((result.get("metadata") or {}).get("resourceVersion") or "")
        return list(result.get("items") or []), version

    async def list_all(self, path: str, what: str, field_selector: str = "") -> list[Object]:
        """The objects of the collection at `path` (every namespace), by a field selector."""
        params = {"fieldSelector": field_selector} if field_selector else None
        return list((await self._call("GET", path, what, params=params)).get("items") or [])

    async def create_slice(self, obj: Mapping[str, Any]) -> Object:
        return await self._call("POST", SLICES, "create resourceslice", body=obj)

    async def dry_run_slice(self, obj: Mapping[str, Any]) -> Object:
        """What the server would store for `obj`, admission and defaulting included, without
        storing it (a server-side dry run)."""
        return await self._call("POST", SLICES, "dry-run create resourceslice", body=obj,
                                params={"dryRun": "All"})  # fmt: skip

    async def group_versions(self, group: str) -> list[str] | None:
        """The versions the server serves of API group `group`; None when it serves none."""
        try:
            found = await self._call("GET", f"/apis/{quote(group, safe='')}",
                                     f"discover API group {group}")  # fmt: skip
        except NotFoundError:
            return None
        return [str(v.get("version")) for v in found.get("versions") or [] if v.get("version")]

    async def create_event(self, namespace: str, event: Mapping[str, Any]) -> Object:
        return await self._call(
            "POST", f"/api/v1/namespaces/{quote(namespace, safe='')}/events",
            f"create event in {namespace}", body=event,
        )  # fmt: skip

    async def update_slice(self, obj: Mapping[str, Any]) -> Object:
        name = str((obj.get("metadata") or {}).get("name", ""))
        return await self._call(
            "PUT", f"{SLICES}/{quote(name, safe='')}", f"update resourceslice {name}", body=obj
        )

    async def delete_slice(self, name: str, uid: str, resource_version: str) -> None:
        options = {
            "kind": "DeleteOptions",
            "apiVersion": "v1",
            "preconditions": {"uid": uid, "resourceVersion": resource_version},
        }
        try:
            await self._call(
                "DELETE", f"{SLICES}/{quote(name, safe='')}", f"delete resourceslice {name}",
                body=options,
            )  # fmt: skip
        except NotFoundError:
            return

    def _open_watch(self, params: Mapping[str, str], seconds: int) -> RESTResponse:
        what = "watch resourceslices"
        try:
            response = self._send("GET", SLICES, params, None, "",
                                  (CONNECT_TIMEOUT, seconds + WATCH_GRACE))  # fmt: skip
            if 200 <= response.status <= 299:
                return response
            data = response.read()
        except ApiException as exc:
            raise api_error(exc, what) from None
        except (TransportError, OSError) as exc:
            raise _unreachable(exc, what) from None
        error = _error(response.status, str(response.reason or ""), data, what)
        if response.status == 410:
            raise WatchExpiredError(str(error))
        raise error

    async def watch_slices(
        self, driver: str, node: str, resource_version: str, timeout: float
    ) -> AsyncGenerator[WatchEvent, None]:
        """Changes to this node's slices after `resource_version`, with bookmarks, until the
        server ends the watch (after `timeout` seconds). WatchExpiredError: the version is too
        old (410), list again. Closing the generator early, or cancelling its reader, closes
        the stream and ends the thread reading it."""
        seconds = max(1, int(timeout))
        params = {
            "fieldSelector": _selector(driver, node),
            "watch": "true",
            "allowWatchBookmarks": "true",
            "resourceVersion": resource_version,
            "timeoutSeconds": str(seconds),
        }
        opening = self._pool.submit(self._open_watch, params, seconds)
        try:
            response = await asyncio.wrap_future(opening)
        except asyncio.CancelledError:  # a stream opened for no one is closed when it opens
            opening.add_done_callback(_close_opened)
            raise
        lines = iter_resp_lines(response.response)
        self._streams.add(response)
        try:
            while (line := await self._run(lambda: _next_line(lines))) is not None:
                if line.strip():
                    yield _event(line)
        finally:
            self._streams.discard(response)
            _close(response)


def _next_line(lines: Iterator[str]) -> str | None:
    """The next line of a watch stream (in a worker thread); None once the server ended it."""
    try:
        return next(lines, None)
    except (TransportError, OSError, ValueError) as exc:
        raise _unreachable(exc, "watch resourceslices") from None


def _close_opened(opening: Future[RESTResponse]) -> None:
    if not opening.cancelled() and opening.exception() is None:
        _close(opening.result())


def _close(response: RESTResponse) -> None:
    """End a watch stream now: shut the socket down (a thread blocked reading it wakes up) and
    close the connection rather than return it to the pool."""
    raw = response.response
    with contextlib.suppress(OSError, ValueError, RuntimeError):  # closed or released
        raw.shutdown()
    raw.close()


def _event(line: str | bytes) -> WatchEvent:
    try:
        decoded = json.loads(line)
    except ValueError:
        raise UnavailableError(f"watch resourceslices: undecodable event {line[:200]!r}") from None
    if not isinstance(decoded, dict):
        raise UnavailableError(f"watch resourceslices: undecodable event {line[:200]!r}")
    kind = str(decoded.get("type", ""))
    obj = decoded.get("object") or {}
    if kind == "ERROR":
        code = int(obj.get("code") or 0)
        message = str(obj.get("message") or "")
        if code == 410:
            raise WatchExpiredError(f"watch resourceslices: 410 {obj.get('reason')}: {message}")
        raise UnavailableError(f"watch resourceslices: {code} {obj.get('reason')}: {message}")
    return WatchEvent(kind, obj)
