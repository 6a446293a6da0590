"""What the dra-plugin needs from the cluster, behind one small interface.

Implemented by the Kubernetes API server's client (`cluster.apiserver`), whichever server it
talks to (a real one, or the in-memory fake of `dracpu.dev.apiserver` in development runs and
tests); unit tests put small in-memory implementations behind it. Objects are plain dicts in
the API's JSON shape.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from dracpu.core.errors import DracpuError

Object = dict[str, Any]


class Cluster(Protocol):
    """Errors: NotFoundError for a missing object, ConflictError for a failed precondition,
    UnavailableError when the backend cannot be reached."""

    def describe(self) -> str:
        """Where the objects come from (`kubernetes`), for status pages and logs."""
        ...

    async def get_claim(self, namespace: str, name: str) -> Object: ...

    async def apply_claim_status(
        self, namespace: str, name: str, uid: str, manager: str, devices: Sequence[Object]
    ) -> Object:
        """Make `devices` the entries of status.devices that `manager` owns (none removes
        them), leaving everyone else's; ConflictError when the claim's UID is not `uid`.
        Returns the stored claim."""
        ...

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


@dataclass(frozen=True)
class WatchEvent:
    """One watch event: ADDED, MODIFIED, DELETED or BOOKMARK, and the object it carries."""

    type: str
    object: Object


class WatchExpiredError(DracpuError):
    """The resourceVersion a watch started from is gone (410 Gone): list again."""


class SliceWatcher(Protocol):
    """A cluster that can list this node's slices with a resourceVersion and watch from it
    (the API server); one that cannot is re-listed periodically."""

    async def list_slices_at(self, driver: str, node: str) -> tuple[list[Object], str]: ...

    def watch_slices(
        self, driver: str, node: str, resource_version: str, timeout: float
    ) -> AsyncGenerator[WatchEvent, None]:
        """A generator, so the reader can close it (and the stream under it) early."""
        ...
