"""The Kubernetes API server as the dra-plugin's cluster (official `kubernetes` client).

The client is synchronous; its calls run in a worker thread so the event loop never blocks.
Objects travel as plain dicts through the generic custom-objects paths, which serve built-in
groups as well, so ResourceSlices and ResourceClaims keep the exact JSON the server stores.
Every error carries the server's own reason (the Status object's message), not only its code.
A watch streams in a thread of its own, one decoded event at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, TypeVar

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from dracpu.core.errors import (
    ConfigError,
    ConflictError,
    DracpuError,
    InvalidInputError,
    NotFoundError,
    UnavailableError,
)
from dracpu.dra_plugin.cluster import Object, WatchEvent, WatchExpiredError

GROUP = "resource.k8s.io"
VERSION = "v1"
T = TypeVar("T")


def server_message(body: Any) -> str:
    """The message of a Status object in a response body; "" when there is none."""
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if isinstance(body, str):
        try:
            body = json.loads(body)
        except ValueError:
            return str(body).strip()[:500]
    if isinstance(body, Mapping):
        return str(body.get("message") or "")
    return ""


def _error(exc: ApiException, what: str) -> DracpuError:
    status = int(exc.status or 0)
    detail = f"{what}: {exc.status} {exc.reason}"
    message = server_message(exc.body)
    if message:
        detail += f": {message}"
    if status == 404:
        return NotFoundError(detail)
    if status in (409, 412):
        return ConflictError(detail)
    if status in (400, 422):
        return InvalidInputError(detail)
    return UnavailableError(detail)


class KubernetesAPI:
    def __init__(self, kubeconfig: str = "") -> None:
        try:
            if kubeconfig:
                api_client = config.new_client_from_config(config_file=kubeconfig)
            else:
                configuration = client.Configuration()
                config.load_incluster_config(client_configuration=configuration)
                api_client = client.ApiClient(configuration)
        except (ConfigException, OSError) as exc:
            source = f"kubeconfig {kubeconfig}" if kubeconfig else "in-cluster configuration"
            raise ConfigError(f"cannot load {source}: {exc}") from None
        self._custom = client.CustomObjectsApi(api_client)
        self._core = client.CoreV1Api(api_client)

    def describe(self) -> str:
        return "kubernetes"

    async def _run(self, what: str, call: Callable[[], T]) -> T:
        try:
            return await asyncio.to_thread(call)
        except ApiException as exc:
            raise _error(exc, what) from None
        except (OSError, ValueError, urllib3.exceptions.HTTPError) as exc:  # refused, TLS, ...
            raise UnavailableError(f"{what}: {exc}") from None

    async def get_claim(self, namespace: str, name: str) -> Object:
        result: Object = await self._run(
            f"retrieve claim {namespace}/{name}",
            lambda: self._custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, "resourceclaims", name
            ),
        )
        return result

    async def node_uid(self, name: str) -> str | None:
        try:
            node = await self._run(f"get node {name}", lambda: self._core.read_node(name))
        except NotFoundError:
            return None
        uid = node.metadata.uid if node.metadata else None
        return str(uid) if uid else None

    async def list_slices(self, driver: str, node: str) -> list[Object]:
        items, _ = await self.list_slices_at(driver, node)
        return items

    async def list_slices_at(self, driver: str, node: str) -> tuple[list[Object], str]:
        """This node's slices of `driver` and the list's resourceVersion to watch from."""
        selector = f"spec.driver={driver},spec.nodeName={node}"
        result: Mapping[str, Any] = await self._run(
            "list resourceslices",
            lambda: self._custom.list_cluster_custom_object(
                GROUP, VERSION, "resourceslices", field_selector=selector
            ),
        )
        version = str((result.get("metadata") or {}).get("resourceVersion") or "")
        return list(result.get("items") or []), version

    async def watch_slices(
        self, driver: str, node: str, resource_version: str, timeout: float
    ) -> AsyncIterator[WatchEvent]:
        """Changes to this node's slices after `resource_version`, with bookmarks, until the
        server ends the watch (after `timeout` seconds). WatchExpiredError: the version is too
        old (410), list again."""
        selector = f"spec.driver={driver},spec.nodeName={node}"
        seconds = max(1, int(timeout))
        response = await self._run(
            "watch resourceslices",
            lambda: self._custom.list_cluster_custom_object(
                GROUP,
                VERSION,
                "resourceslices",
                field_selector=selector,
                watch=True,
                resource_version=resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=seconds,
                _preload_content=False,
                _request_timeout=(10, seconds + 30),
            ),
        )
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[bytes | BaseException | None] = asyncio.Queue()

        def pump() -> None:
            try:
                for line in _lines(response):
                    loop.call_soon_threadsafe(queue.put_nowait, line)
            except BaseException as exc:  # handed to the event loop
                loop.call_soon_threadsafe(queue.put_nowait, exc)
            else:
                loop.call_soon_threadsafe(queue.put_nowait, None)

        thread = threading.Thread(target=pump, name="watch-resourceslices", daemon=True)
        thread.start()
        try:
            while True:
                item = await queue.get()
                if item is None:
                    return
                if isinstance(item, BaseException):
                    raise UnavailableError(f"watch resourceslices: {item}") from None
                yield _event(item)
        finally:
            # Unblocks the reading thread when we stop early (urllib3 >= 2.3 has shutdown).
            with contextlib.suppress(Exception):
                getattr(response, "shutdown", response.close)()
            with contextlib.suppress(Exception):
                response.release_conn()

    async def create_slice(self, obj: Mapping[str, Any]) -> Object:
        body = dict(obj)
        stored: Object = await self._run(
            "create resourceslice",
            lambda: self._custom.create_cluster_custom_object(
                GROUP, VERSION, "resourceslices", body
            ),
        )
        return stored

    async def update_slice(self, obj: Mapping[str, Any]) -> Object:
        body = dict(obj)
        name = str((body.get("metadata") or {}).get("name", ""))
        stored: Object = await self._run(
            f"update resourceslice {name}",
            lambda: self._custom.replace_cluster_custom_object(
                GROUP, VERSION, "resourceslices", name, body
            ),
        )
        return stored

    async def delete_slice(self, name: str, uid: str, resource_version: str) -> None:
        options = client.V1DeleteOptions(
            preconditions=client.V1Preconditions(uid=uid, resource_version=resource_version)
        )
        try:
            await self._run(
                f"delete resourceslice {name}",
                lambda: self._custom.delete_cluster_custom_object(
                    GROUP, VERSION, "resourceslices", name, body=options
                ),
            )
        except NotFoundError:
            return


def _lines(response: Any) -> Any:
    """Complete lines of a streamed response body (events may span chunks)."""
    pending = b""
    for chunk in response.stream(amt=None, decode_content=True):
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if line.strip():
                yield line
    if pending.strip():
        yield pending


def _event(line: bytes) -> WatchEvent:
    try:
        decoded = json.loads(line)
    except ValueError:
        raise UnavailableError(f"watch resourceslices: undecodable event {line[:200]!r}") from None
    kind = str(decoded.get("type", ""))
    obj = decoded.get("object") or {}
    if kind == "ERROR":
        code = int(obj.get("code") or 0)
        message = str(obj.get("message") or "")
        if code == 410:
            raise WatchExpiredError(f"watch resourceslices: 410 {obj.get('reason')}: {message}")
        raise UnavailableError(f"watch resourceslices: {code} {obj.get('reason')}: {message}")
    return WatchEvent(kind, obj)
