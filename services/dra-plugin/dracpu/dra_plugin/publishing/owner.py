"""The Node object that owns the node's ResourceSlices (they are garbage-collected with it).

Its UID is read once, again whenever the publisher asks (a resync, or our slices deleted by
someone else: the garbage collector does when the Node was recreated), and every `retry`
seconds while there is no Node.
"""

from __future__ import annotations

import time

from dracpu.core.log import get_logger
from dracpu.dra_plugin.cluster.objects import Cluster
from dracpu.dra_plugin.publishing.slices import Owner

log = get_logger(__name__)


class NodeOwner:
    def __init__(self, cluster: Cluster, node: str, retry: float) -> None:
        self.cluster = cluster
        self.node = node
        self.retry = retry
        self.owner: Owner | None = None
        self.read_at: float | None = None  # monotonic time of the last read; None before it

    def missing_due(self, now: float) -> bool:
        """No Node known, and it is time to look for one again."""
        read_at = self.read_at
        return self.owner is None and (read_at is None or now - read_at >= self.retry)

    def next_look(self) -> float | None:
        """When to look for a missing Node again; None when one is known or none was read."""
        if self.owner is None and self.read_at is not None:
            return self.read_at + self.retry
        return None

    async def reference(self, reread: bool, *, first: bool) -> Owner | None:
        """The owner to write into slices, read from the API server when `reread`, on the
        first call, or when a missing Node is due to be looked for."""
        known = self.owner is not None or not self.missing_due(time.monotonic())
        if not reread and self.read_at is not None and known:
            return self.owner
        uid = await self.cluster.node_uid(self.node)
        self.read_at = time.monotonic()
        previous = self.owner
        self.owner = Owner(self.node, uid) if uid else None
        if uid and previous is not None and previous.uid != uid:
            log.info(2, "the Node was recreated; slices follow its new UID", node=self.node,
                     old_uid=previous.uid, uid=uid)  # fmt: skip
        elif uid is None and (previous is not None or first):
            log.info(2, "no Node object found; slices carry no owner reference", node=self.node)
        return self.owner
