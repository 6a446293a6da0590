"""Where the tiers find things: the cache of built tools (`DRACPU_CACHE`, as tools/lib.sh has
it) and short temporary directories, for the unix sockets a test binds (a socket's path must
fit in 107 bytes, which pytest's own temporary paths often do not)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# Built tools, keyed by tool and version, outside every clone (tools/lib.sh cache_dir).
CACHE = Path(os.environ.get("DRACPU_CACHE", str(Path.home() / ".cache" / "dracpu")))


@contextmanager
def short_tmp(prefix: str = "t-") -> Iterator[Path]:
    """A new directory /tmp/<prefix><random>, removed with what it holds on leaving."""
    path = Path(tempfile.mkdtemp(dir="/tmp", prefix=prefix))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
