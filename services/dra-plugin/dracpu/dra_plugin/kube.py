"""The Kubernetes API server as the dra-plugin's cluster (official `kubernetes` client).

The client is synchronous; its calls run in a worker thread so the event loop never blocks.
Objects travel as plain dicts through the generic custom-objects paths, which serve built-in
groups as well, so ResourceSlices and ResourceClaims keep the exact JSON the server stores.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
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
from dracpu.dra_plugin.cluster import Object

GROUP = "resource.k8s.io"
VERSION = "v1"
T = TypeVar("T")


def _error(exc: ApiException, what: str) -> DracpuError:
    status = int(exc.status or 0)
    detail = f"{what}: {exc.status} {exc.reason}"
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
        selector = f"spec.driver={driver},spec.nodeName={node}"
        result: Mapping[str, Any] = await self._run(
            "list resourceslices",
            lambda: self._custom.list_cluster_custom_object(
                GROUP, VERSION, "resourceslices", field_selector=selector
            ),
        )
        return list(result.get("items") or [])

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
