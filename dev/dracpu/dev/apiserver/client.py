"""The dev tools' and tests' side of an API server (the fake, or any other a kubeconfig names):
ResourceClaims written and deleted as the scheduler and the users would, ResourceSlices and
claims read. Blocking calls over httpx: each is one short request to a local server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import yaml

from dracpu.core.errors import (
    ConflictError,
    DracpuError,
    InvalidInputError,
    NotFoundError,
    StateError,
    UnavailableError,
)

Object = dict[str, Any]
RESOURCE = "/apis/resource.k8s.io/v1"
TIMEOUT = 10.0  # seconds per request


def server_of(kubeconfig: Path) -> str:
    """The server URL of a kubeconfig's current context (its first cluster without one)."""
    try:
        document = yaml.safe_load(kubeconfig.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UnavailableError(f"kubeconfig {kubeconfig}: {exc.strerror or exc}") from None
    except yaml.YAMLError:
        raise InvalidInputError(f"kubeconfig {kubeconfig}: not valid YAML") from None
    clusters = document.get("clusters") if isinstance(document, dict) else None
    if not clusters:
        raise InvalidInputError(f"kubeconfig {kubeconfig}: no clusters in it")
    contexts = {c["name"]: c.get("context") or {} for c in document.get("contexts") or []}
    wanted = contexts.get(document.get("current-context") or "", {}).get("cluster")
    chosen = next((c for c in clusters if c.get("name") == wanted), clusters[0])
    return str(chosen["cluster"]["server"])


def _error(response: httpx.Response, what: str) -> DracpuError:
    try:
        message = str(response.json().get("message") or response.reason_phrase)
    except ValueError:
        message = response.reason_phrase
    kind = {404: NotFoundError, 409: ConflictError, 400: InvalidInputError,
            422: InvalidInputError}.get(response.status_code, StateError)  # fmt: skip
    return kind(f"{what}: {response.status_code} {message}")


class ClusterClient:
    def __init__(self, kubeconfig: Path) -> None:
        self.server = server_of(kubeconfig)
        self._http = httpx.Client(base_url=self.server, timeout=TIMEOUT)

    def close(self) -> None:
        self._http.close()

    def _call(self, method: str, path: str, what: str, body: Object | None = None) -> Object:
        try:
            response = self._http.request(method, path, json=body)
        except httpx.HTTPError as exc:
            raise UnavailableError(f"{what}: API server {self.server}: {exc}") from None
        if response.status_code >= 300:
            raise _error(response, what)
        answer = response.json()
        if not isinstance(answer, dict):
            raise StateError(f"{what}: the API server answered no object")
        return answer

    def _items(self, path: str, what: str) -> list[Object]:
        return [item for item in self._call("GET", path, what).get("items") or []]

    def slices(self) -> list[Object]:
        return self._items(f"{RESOURCE}/resourceslices", "list resourceslices")

    def claims(self) -> list[Object]:
        return self._items(f"{RESOURCE}/resourceclaims", "list resourceclaims")

    @staticmethod
    def _claim_path(namespace: str, name: str) -> str:
        return f"{RESOURCE}/namespaces/{namespace}/resourceclaims/{name}"

    def read_claim(self, namespace: str, name: str) -> Object:
        return self._call("GET", self._claim_path(namespace, name), f"claim {namespace}/{name}")

    def claim_exists(self, namespace: str, name: str) -> bool:
        try:
            self.read_claim(namespace, name)
        except NotFoundError:
            return False
        return True

    def write_claim(self, claim: Object) -> Object:
        """Create the claim, then write its status (its allocation, its reservedFor) through
        the status subresource, as the scheduler does; a claim of that name is replaced."""
        meta = claim["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        what = f"claim {namespace}/{name}"
        self.delete_claim(namespace, name)
        body = {key: value for key, value in claim.items() if key != "status"}
        stored = self._call("POST", f"{RESOURCE}/namespaces/{namespace}/resourceclaims", what,
                            body)  # fmt: skip
        if not claim.get("status"):
            return stored
        stored["status"] = claim["status"]
        return self._call("PUT", self._claim_path(namespace, name) + "/status", what, stored)

    def delete_claim(self, namespace: str, name: str) -> bool:
        """Delete; False when there was no such claim."""
        try:
            self._call("DELETE", self._claim_path(namespace, name), f"claim {namespace}/{name}")
        except NotFoundError:
            return False
        return True

    def apply_claim_status(
        self, namespace: str, name: str, manager: str, devices: list[Object]
    ) -> Object:
        """Server-side apply of the claim's status.devices as field manager `manager` (forced),
        as a driver writes its entries."""
        what = f"claim {namespace}/{name}"
        try:
            response = self._http.patch(
                self._claim_path(namespace, name) + "/status",
                params={"fieldManager": manager, "force": "true"},
                headers={"Content-Type": "application/apply-patch+yaml"},
                content=json.dumps({"status": {"devices": devices}}),  # JSON is YAML too
            )
        except httpx.HTTPError as exc:
            raise UnavailableError(f"{what}: API server {self.server}: {exc}") from None
        if response.status_code >= 300:
            raise _error(response, what)
        answer: Object = response.json()
        return answer

    def create_slice(self, obj: Object) -> Object:
        """Create a ResourceSlice as another writer would (its name or generateName kept)."""
        return self._call("POST", f"{RESOURCE}/resourceslices", "create resourceslice", obj)

    def replace_slice(self, obj: Object) -> Object:
        """Replace a slice, guarded by the resourceVersion it carries."""
        name = obj["metadata"]["name"]
        return self._call("PUT", f"{RESOURCE}/resourceslices/{name}", f"slice {name}", obj)

    def delete_slice(self, name: str) -> None:
        self._call("DELETE", f"{RESOURCE}/resourceslices/{name}", f"slice {name}")

    def create_node(self, name: str, uid: str) -> Object:
        node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "uid": uid}}
        return self._call("POST", "/api/v1/nodes", f"node {name}", node)
