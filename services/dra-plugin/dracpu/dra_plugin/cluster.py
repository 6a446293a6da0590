"""What the dra-plugin needs from the cluster, behind one small interface.

Two implementations: the Kubernetes API server (`dracpu.dra_plugin.kube`) and a local cluster
folder (`dracpu.dra_plugin.folder`) used by the dev runner and the tests. Objects are plain
dicts in the API's JSON shape, so everything above this interface is the same for both.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

Object = dict[str, Any]


class Cluster(Protocol):
    """Errors: NotFoundError for a missing object, ConflictError for a failed precondition,
    UnavailableError when the backend cannot be reached."""

    def describe(self) -> str:
        """`kubernetes` or `cluster-dir:<path>`, for status pages and logs."""
        ...

    async def get_claim(self, namespace: str, name: str) -> Object: ...

    async def node_uid(self, name: str) -> str | None:
        """The Node's UID, or None when there is no Node object to own the slices."""
        ...

    async def list_slices(self, driver: str, node: str) -> list[Object]: ...

    async def create_slice(self, obj: Mapping[str, Any]) -> Object:
        """Create from metadata.generateName; returns the stored object."""
        ...

    async def update_slice(self, obj: Mapping[str, Any]) -> Object:
        """Replace, guarded by metadata.resourceVersion."""
        ...

    async def delete_slice(self, name: str, uid: str, resource_version: str) -> None:
        """Delete with UID and resourceVersion preconditions; already gone is fine."""
        ...
