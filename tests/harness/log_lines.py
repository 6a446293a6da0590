"""The driver's log lines as a test reads them: every record of the `dracpu` loggers, with the
structured fields each line carries, kept while a `captured()` block runs."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class LogLines(logging.Handler):
    """The records seen, informational ones included."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def said(self, message: str) -> list[dict[str, Any]]:
        """The fields of every line whose message is `message`, in order."""
        return [dict(getattr(r, "fields", {})) for r in self.records if r.getMessage() == message]


@contextmanager
def captured() -> Iterator[LogLines]:
    """Every `dracpu` log record written inside the block."""
    handler = LogLines()
    logger = logging.getLogger("dracpu")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)  # the informational lines too
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
