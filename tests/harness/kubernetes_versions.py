"""The Kubernetes releases the control-plane checks run against (tools/kubernetes-versions).

`DRACPU_KUBE_VERSION` picks the release of a run (default: the newest); its feature gates are
the ones the file names for it. kubectl is always the newest release's: it is the only
kubectl built, and the checks use nothing of it that older servers lack.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

FILE = Path(__file__).resolve().parents[2] / "tools" / "kubernetes-versions"


@dataclass(frozen=True)
class Release:
    version: str  # "v1.34.4"
    gates: str  # "DRAConsumableCapacity=true", "" for none

    @property
    def minor(self) -> str:
        """The minor, "1.34" of "v1.34.4"."""
        return ".".join(self.version.removeprefix("v").split(".")[:2])


def read_releases(text: str | None = None) -> tuple[Release, ...]:
    """Every line of the file, oldest first."""
    lines = (FILE.read_text(encoding="utf-8") if text is None else text).splitlines()
    releases = []
    for line in lines:
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        version, gates = fields[0], fields[1] if len(fields) > 1 else "-"
        releases.append(Release(version, "" if gates == "-" else gates))
    return tuple(releases)


TESTED = read_releases()
OLDEST, NEWEST = TESTED[0], TESTED[-1]


def selected(environ: Mapping[str, str] | None = None) -> Release:
    """The release named by DRACPU_KUBE_VERSION, or the newest."""
    wanted = (os.environ if environ is None else environ).get("DRACPU_KUBE_VERSION", "")
    if not wanted:
        return NEWEST
    for release in TESTED:
        if wanted in (release.version, release.minor):
            return release
    names = ", ".join(r.version for r in TESTED)
    raise ValueError(f"DRACPU_KUBE_VERSION={wanted} is not a tested release ({names})")
