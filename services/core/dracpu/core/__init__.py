"""Shared core of the dracpu services: cpusets, configuration, logging, errors, gRPC plumbing."""

import os
import sys

DISTRIBUTION = "dra-driver-cpu"
_DIST_INFO_PREFIX = DISTRIBUTION.replace("-", "_") + "-"


def _installed_version() -> str:
    """The version in the distribution's metadata, written once in pyproject.toml; every
    installed build (the editable checkout, a wheel, an image) carries it. Read from the
    `Version:` line of its dist-info's METADATA rather than through importlib.metadata, whose
    import (email, zipfile, csv) costs every service about 2 MB of memory it keeps."""
    for entry in sys.path:
        try:
            names = [n for n in os.listdir(entry or ".") if n.startswith(_DIST_INFO_PREFIX)]
        except OSError:
            continue
        for name in names:
            if not name.endswith(".dist-info"):
                continue
            try:
                with open(os.path.join(entry or ".", name, "METADATA"), encoding="utf-8") as f:
                    for line in f:
                        if line.startswith("Version:"):
                            return line.removeprefix("Version:").strip()
                        if not line.strip():
                            break  # the headers end at the first blank line
            except OSError:
                continue
    return _metadata_version()


def _metadata_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:  # a tree imported without being installed
        return "0+unknown"


__version__ = _installed_version()
