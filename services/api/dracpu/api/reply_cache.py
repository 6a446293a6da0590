"""Reuse of a rendered answer while the backend's reply is byte-for-byte the same.

A monitoring loop polling /v1/claims on a node with a thousand claims would otherwise
re-translate an unchanged reply every time. Keyed by the exact reply bytes, a hit can never
serve stale data: different state means different bytes.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable


class ReplyCache:
    """The last rendered body per key (say, a namespace filter), valid for one reply."""

    def __init__(self, capacity: int = 16) -> None:
        self._entries: OrderedDict[Hashable, tuple[bytes, bytes]] = OrderedDict()
        self._capacity = capacity
        self.hits = 0

    def render(self, key: Hashable, reply: bytes, render: Callable[[bytes], bytes]) -> bytes:
        entry = self._entries.get(key)
        if entry is not None and entry[0] == reply:
            self._entries.move_to_end(key)
            self.hits += 1
            return entry[1]
        body = render(reply)
        self._entries[key] = (reply, body)
        self._entries.move_to_end(key)
        while len(self._entries) > self._capacity:
            self._entries.popitem(last=False)
        return body
