"""A tier's session-wide peers (an engine, a control plane, a cluster, a guest) stopped as soon
as the tier's last test is done, not at the end of the session: the tiers after it then run
without them beside. Each closer runs once; the fixture's own teardown finds it done."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest


class TierEnd:
    """The closers of one tier directory's session fixtures, run last-registered first."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory.resolve()
        self._closers: list[Callable[[], None]] = []

    def ours(self, item: pytest.Item) -> bool:
        return Path(str(item.path)).resolve().is_relative_to(self.directory)

    def at_end(self, closer: Callable[[], None]) -> Callable[[], None]:
        """Register `closer`; returns a function that runs it at most once, for the fixture's
        own teardown."""
        done = False

        def once() -> None:
            nonlocal done
            if not done:
                done = True
                closer()

        self._closers.append(once)
        return once

    def after(self, item: pytest.Item, nextitem: pytest.Item | None) -> None:
        """Call from the tier's pytest_runtest_teardown: after its last test, close all."""
        if self.ours(item) and (nextitem is None or not self.ours(nextitem)):
            while self._closers:
                self._closers.pop()()
