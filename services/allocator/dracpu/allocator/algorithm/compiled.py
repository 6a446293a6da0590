"""The algorithm's modules compiled to C by mypyc, used only when built from exactly these sources.

`tools/compile-algorithm.py` compiles `COMPILED` into `<cache>/algorithm-<python tag>-<digest>/`
(`<cache>`: `$DRACPU_CACHE`, by default `~/.cache/dracpu`), the digest being that of the
sources below. The package puts that folder first on its path when it exists, so an edited
source never runs as a stale build: its digest names another folder. Without a build (no C
compiler, an image, `DRACPU_PURE_PYTHON=1`) the same modules run as Python; the answers are
the same, and the 32-NUMA-node worst cases take about twice as long.
"""

from __future__ import annotations

import hashlib
import os
import sys
import sysconfig
from pathlib import Path

COMPILED = (
    "accumulator",
    "balance",
    "distributed",
    "numa_plan",
    "packed",
    "remainder",
    "remainder_floor",
    "topology_index",
)
# The shared library mypyc builds for the group, inside the package.
GROUP = "compiled"
SOURCES = Path(__file__).resolve().parent


def source_digest(sources: Path = SOURCES) -> str:
    """A digest of the compiled modules' sources and of the interpreter's ABI."""
    digest = hashlib.sha256(sys.implementation.cache_tag.encode())
    for name in COMPILED:
        digest.update(name.encode() + b"\0" + (sources / f"{name}.py").read_bytes() + b"\0")
    return digest.hexdigest()[:20]


def cache_root() -> Path | None:
    """`$DRACPU_CACHE`, else `~/.cache/dracpu`; None for a user without a home."""
    configured = os.environ.get("DRACPU_CACHE")
    if configured:
        return Path(configured)
    home = os.path.expanduser("~")
    return None if home == "~" else Path(home) / ".cache" / "dracpu"


def build_dir(sources: Path = SOURCES, root: Path | None = None) -> Path:
    """Where the build of these sources lives (whether or not it was built)."""
    base = cache_root() if root is None else root
    if base is None:
        raise FileNotFoundError("no tool cache: neither DRACPU_CACHE nor a home is set")
    return base / f"algorithm-{sys.implementation.cache_tag}-{source_digest(sources)}"


def package_dir(build: Path) -> Path:
    return build / "dracpu" / "allocator" / "algorithm"


def complete(build: Path) -> bool:
    """A build holds the group's library and every module (the tool writes it atomically)."""
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    folder = package_dir(build)
    return all((folder / f"{name}{suffix}").is_file() for name in (f"{GROUP}__mypyc", *COMPILED))


def native_path(sources: Path = SOURCES, root: Path | None = None) -> Path | None:
    """The folder of compiled modules to import before the sources, or None to run Python."""
    if os.environ.get("DRACPU_PURE_PYTHON") == "1":
        return None
    try:
        build = build_dir(sources, root)
    except OSError:
        return None  # no cache, or a source unreadable here (its import reports that)
    return package_dir(build) if complete(build) else None
