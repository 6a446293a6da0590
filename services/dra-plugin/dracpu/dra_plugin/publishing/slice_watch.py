"""This node's ResourceSlices as the API server holds them, kept by one list and a watch.

The reflector pattern of client-go (tools/cache/reflector.go, ListAndWatch): list once, then
watch from the list's resourceVersion with bookmarks; when a watch ends (the server closes it
after a randomized 5-10 minutes) watch again from the last version seen; when that version has
been compacted away (410 Gone) list again. The plugin's own writes go into the cache at once
with the version the server returned, and an older version arriving later by the watch does not
overwrite them: resourceVersions of one resource increase, as the upstream mutation cache
(tools/cache/mutation_cache.go) assumes. Anything changed by someone else sets `changed`, so
the publisher compares and repairs at once instead of on a timer.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dracpu.core.errors import DracpuError, UnavailableError
from dracpu.core.log import get_logger
from dracpu.core.retry import Backoff
from dracpu.dra_plugin.cluster.objects import Object, SliceWatcher, WatchEvent, WatchExpiredError

log = get_logger(__name__)

MIN_WATCH_TIMEOUT = 300.0  # client-go's minWatchTimeout; each watch lasts 1-2x this
MAX_BACKOFF = 30.0


def _version(obj: Mapping[str, Any]) -> int | None:
    text = (obj.get("metadata") or {}).get("resourceVersion")
    try:
        return int(str(text))
    except (TypeError, ValueError):
        return None


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


@dataclass
class WatchStats:
    lists: int = 0
    watches: int = 0
    events: int = 0
    expired: int = 0  # 410 Gone: relisted
    errors: int = 0
    last_error: str = ""


class SliceWatch:
    def __init__(
        self,
        source: SliceWatcher,
        driver: str,
        node: str,
        *,
        min_watch_timeout: float = MIN_WATCH_TIMEOUT,
    ) -> None:
        self.source = source
        self.driver = driver
        self.node = node
        self.min_watch_timeout = min_watch_timeout
        self.slices: dict[str, Object] = {}
        self.resource_version = ""
        self.synced = asyncio.Event()  # the first list is in
        self.changed = asyncio.Event()  # someone else changed or deleted one of our slices
        self.deleted_by_others = False  # e.g. the garbage collector: re-check the owner
        self._gone: dict[str, int] = {}  # deletions seen by the watch: name -> version
        self.stats = WatchStats()

    def snapshot(self) -> list[Object]:
        return list(self.slices.values())

    # ---- our own writes ----------------------------------------------------------------

    def remember(self, stored: Object) -> None:
        """A slice the plugin just created or updated, as the server stored it. The watch may
        have been faster: a newer version, or a deletion, already seen wins."""
        name = _name(stored)
        cached = self.slices.get(name)
        if cached is not None and _older(stored, cached):
            return
        version = _version(stored)
        gone = self._gone.get(name)
        if gone is not None and (version is None or version < gone):
            return
        self.slices[name] = stored

    def forget(self, name: str) -> None:
        """A slice the plugin just deleted."""
        self.slices.pop(name, None)

    # ---- list and watch ----------------------------------------------------------------

    async def run(self) -> None:
        backoff = Backoff(initial=1.0, maximum=MAX_BACKOFF)
        while True:
            try:
                if not self.resource_version:
                    await self._list()
                await self._watch()
                backoff.reset()
            except WatchExpiredError as exc:
                self.stats.expired += 1
                log.info(2, "slice watch expired; listing again", reason=str(exc))
                self.resource_version = ""
            except DracpuError as exc:
                self.stats.errors += 1
                self.stats.last_error = str(exc)
                delay = backoff.next_delay()
                log.warning("slice watch failed; retrying", error=str(exc), retry_in=delay)
                await asyncio.sleep(delay)

    async def _list(self) -> None:
        items, version = await self.source.list_slices_at(self.driver, self.node)
        self.stats.lists += 1
        fresh = {_name(item): item for item in items}
        if self.synced.is_set() and _differs(self.slices, fresh):
            self.changed.set()
        self.slices = fresh
        self._gone.clear()
        self.resource_version = version
        self.synced.set()
        log.info(4, "listed ResourceSlices", count=len(items), resource_version=version)

    async def _watch(self) -> None:
        timeout = self.min_watch_timeout * (1 + random.random())
        self.stats.watches += 1
        # Closed at once when _apply raises, not whenever the generator is collected.
        async with contextlib.aclosing(
            self.source.watch_slices(self.driver, self.node, self.resource_version, timeout)
        ) as events:
            async for event in events:
                self._apply(event)

    def _apply(self, event: WatchEvent) -> None:
        self.stats.events += 1
        obj = event.object
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if version:
            self.resource_version = str(version)
        if event.type == "BOOKMARK":
            return
        name = _name(obj)
        cached = self.slices.get(name)
        if event.type in ("ADDED", "MODIFIED"):
            if cached is not None and _older(obj, cached):
                return  # the watch catching up with a write of ours
            self.slices[name] = obj
            if cached is None or _version(cached) != _version(obj):
                log.info(6, "slice changed by someone else", name=name, event=event.type)
                self.changed.set()
        elif event.type == "DELETED":
            gone = _version(obj)
            if gone is not None:
                if len(self._gone) > 1024:  # names are never reused (generateName)
                    self._gone.clear()
                self._gone[name] = gone
            if cached is None:
                return  # deleted by us, already forgotten
            if _older(obj, cached):
                return
            del self.slices[name]
            log.info(4, "slice deleted by someone else", name=name)
            self.deleted_by_others = True
            self.changed.set()
        else:
            raise UnavailableError(f"watch resourceslices: unexpected event type {event.type!r}")


def _older(event_obj: Mapping[str, Any], cached: Mapping[str, Any]) -> bool:
    new, old = _version(event_obj), _version(cached)
    return new is not None and old is not None and new < old


def _differs(old: Mapping[str, Object], new: Mapping[str, Object]) -> bool:
    if old.keys() != new.keys():
        return True
    return any(_version(old[k]) != _version(new[k]) for k in old)
