"""The Kubernetes API server as the dra-plugin's cluster, spoken to over its REST paths.

A small asyncio client on httpx for the few calls the plugin makes: read a ResourceClaim and a
Node; list, watch, create, replace and delete this node's ResourceSlices; server-side apply of
a claim's status.devices entries. Objects travel as
plain dicts, so ResourceSlices and ResourceClaims keep the exact JSON the server stores. Every
error carries the server's own reason (the Status object's message), not only its code. A
watch is one streamed response holding one JSON event per line.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Mapping, Sequence
from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import httpx

from dracpu.core.errors import (
    ConflictError,
    DracpuError,
    InvalidInputError,
    NotFoundError,
    UnavailableError,
)
from dracpu.dra_plugin.cluster import Object, WatchEvent, WatchExpiredError
from dracpu.dra_plugin.kubeconfig import ClusterAccess
from dracpu.dra_plugin.kubeconfig import load as load_access

RESOURCE_API = "/apis/resource.k8s.io/v1"
SLICES = f"{RESOURCE_API}/resourceslices"
CONNECT_TIMEOUT = 10.0
# A request the server has not answered by then is failed and retried by its caller (the
# publisher's next round, the kubelet's next prepare) rather than waited on for ever.
REQUEST_TIMEOUT = 60.0
# A watch is silent while nothing changes: it may read nothing until the server ends it.
WATCH_GRACE = 30.0
USER_AGENT = "dracpu-dra-plugin"
APPLY_PATCH = "application/apply-patch+yaml"


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


def _error(response: httpx.Response, what: str) -> DracpuError:
    status = response.status_code
    reason = response.reason_phrase or _phrase(status)
    detail = f"{what}: {status} {reason}".rstrip()
    message = server_message(response.content)
    if message:
        detail += f": {message}"
    if status == 404:
        return NotFoundError(detail)
    if status in (409, 412):
        return ConflictError(detail)
    if status in (400, 422):
        return InvalidInputError(detail)
    return UnavailableError(detail)


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


def _unreachable(exc: Exception, what: str) -> UnavailableError:
    """Refused, reset, TLS, timeouts: the transport's own words, one line."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return UnavailableError(f"{what}: {text}")


def _selector(driver: str, node: str) -> str:
    return f"spec.driver={driver},spec.nodeName={node}"


class KubernetesAPI:
    def __init__(self, kubeconfig: str = "", *, access: ClusterAccess | None = None) -> None:
        self.access = access or load_access(kubeconfig)
        # tls-server-name: httpcore sends it as SNI and checks the certificate against it.
        self._extensions = (
            {"sni_hostname": self.access.server_name} if self.access.server_name else {}
        )
        self._client = httpx.AsyncClient(
            base_url=self.access.server,
            # A plain http server needs no TLS context: False spares loading a CA bundle.
            verify=self.access.tls if self.access.tls is not None else False,
            auth=self.access.auth,
            headers={"Accept": "application/json", "User-Agent": USER_AGENT},
            timeout=httpx.Timeout(REQUEST_TIMEOUT, connect=CONNECT_TIMEOUT),
        )

    def describe(self) -> str:
        return "kubernetes"

    async def aclose(self) -> None:
        await self._client.aclose()

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
        try:
            if content_type:  # JSON is YAML: an apply patch is sent as JSON text
                response = await self._client.request(
                    method, path, params=params, content=json.dumps(body).encode(),
                    headers={"Content-Type": content_type}, extensions=self._extensions,
                )  # fmt: skip
            else:
                response = await self._client.request(
                    method, path, params=params, json=body, extensions=self._extensions
                )
        except (httpx.HTTPError, OSError) as exc:
            raise _unreachable(exc, what) from None
        if response.is_error:
            raise _error(response, what)
        try:
            decoded = response.json()
        except ValueError:
            decoded = None
        if not isinstance(decoded, dict):
            raise UnavailableError(f"{what}: the server answered {response.status_code} "
                                   "without a JSON object")  # fmt: skip
        return decoded

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
            content_type=APPLY_PATCH,
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

    async def watch_slices(
        self, driver: str, node: str, resource_version: str, timeout: float
    ) -> AsyncGenerator[WatchEvent, None]:
        """Changes to this node's slices after `resource_version`, with bookmarks, until the
        server ends the watch (after `timeout` seconds). WatchExpiredError: the version is too
        old (410), list again. Closing the generator early closes the stream."""
        what = "watch resourceslices"
        seconds = max(1, int(timeout))
        params = {
            "fieldSelector": _selector(driver, node),
            "watch": "true",
            "allowWatchBookmarks": "true",
            "resourceVersion": resource_version,
            "timeoutSeconds": str(seconds),
        }
        try:
            async with self._client.stream(
                "GET",
                SLICES,
                params=params,
                timeout=httpx.Timeout(seconds + WATCH_GRACE, connect=CONNECT_TIMEOUT),
                extensions=self._extensions,
            ) as response:
                if response.is_error:
                    await response.aread()
                    error = _error(response, what)
                    if response.status_code == 410:
                        raise WatchExpiredError(str(error))
                    raise error
                async for line in response.aiter_lines():
                    if line.strip():
                        yield _event(line)
        except (httpx.HTTPError, OSError) as exc:
            raise _unreachable(exc, what) from None

    async def create_slice(self, obj: Mapping[str, Any]) -> Object:
        return await self._call("POST", SLICES, "create resourceslice", body=obj)

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
