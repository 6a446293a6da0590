"""Which runtimes can take a plugin-initiated UpdateContainers without deadlocking.

Before containerd/nri v0.12.1 the runtime side held its adaptation lock while applying a
plugin's unsolicited UpdateContainers; containerd takes its own NRI lock in the opposite order
on lifecycle events, so the two can deadlock (containerd/containerd#13733, fixed by
containerd/nri#301 in v0.12.1). The decision below is deliberately conservative: only where
the runtime is known to carry the fix.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from typing import Final

from dracpu.core.errors import ConfigError

FIXED_NRI: Final = (0, 12, 1)

# Runtime releases known to vendor NRI >= v0.12.1. containerd 2.4.0 ships NRI v0.12.3
# (containerd#14065); whether a containerd 2.3.x patch release took v0.12.1 is not confirmed,
# and no CRI-O release is known to carry it yet (1.34.0 vendors NRI v0.9.1 and has the same lock
# order in its own NRI glue), so those stay off unless they report an NRI
# version themselves (Configure.NRI_version, sent from NRI v0.12 on).
FIXED_RUNTIMES: Final[dict[str, tuple[int, int, int]]] = {
    "containerd": (2, 4, 0),
}

_VERSION = re.compile(
    r"^v?(?P<major>\d+)\.(?P<minor>\d+)(?:\.(?P<patch>\d+))?"
    r"(?P<pre>-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?$"
)
# `git describe` output (v2.2.0-225-ge9dc15b7a) is a build after the release, not before it.
_GIT_DESCRIBE = re.compile(r"^-\d+-g[0-9a-f]+(?:\.\w+)?$")


class UnsolicitedMode(Enum):
    AUTO = "auto"
    ON = "on"
    OFF = "off"

    @classmethod
    def parse(cls, text: str) -> UnsolicitedMode:
        try:
            return cls(text.strip().lower())
        except ValueError:
            raise ConfigError(
                f"--unsolicited-updates must be auto, on or off, not {text!r}"
            ) from None


def parse_version(text: str) -> tuple[int, int, int] | None:
    """`v1.2.3`, `1.2`, `2.4.0-rc.1`, `1.34.1+git` -> (major, minor, patch); None if not one.

    A pre-release or Go pseudo-version (`v0.12.1-0.20260718-84180b63351d`) counts as the
    release before it: it may predate the fix.
    """
    match = _VERSION.match(text.strip())
    if match is None:
        return None
    major, minor = int(match["major"]), int(match["minor"])
    patch = int(match["patch"] or 0)
    pre = match["pre"]
    if pre is None or _GIT_DESCRIBE.match(pre):
        return (major, minor, patch)
    if patch > 0:
        return (major, minor, patch - 1)
    if minor > 0:
        return (major, minor - 1, 9999)
    return (major - 1, 9999, 9999) if major > 0 else (0, 0, 0)


def _runtime_key(name: str) -> str:
    lowered = name.strip().lower()
    if lowered in ("cri-o", "crio"):
        return "cri-o"
    return lowered


@dataclass(frozen=True, slots=True)
class Decision:
    enabled: bool
    reason: str


def decide(
    mode: UnsolicitedMode, runtime_name: str, runtime_version: str, nri_version: str
) -> Decision:
    """Whether to push shared-pool changes with UpdateContainers to this runtime."""
    if mode is UnsolicitedMode.ON:
        return Decision(True, "forced on by --unsolicited-updates=on")
    if mode is UnsolicitedMode.OFF:
        return Decision(False, "forced off by --unsolicited-updates=off")
    nri = parse_version(nri_version) if nri_version else None
    # 0.0.0-unknown is what the runtime reports when it could not read its own build info.
    if nri is not None and nri != (0, 0, 0):
        ok = nri >= FIXED_NRI
        return Decision(
            ok,
            f"runtime reports NRI {nri_version}; "
            + ("has the UpdateContainers deadlock fix" if ok else "predates v0.12.1"),
        )
    key = _runtime_key(runtime_name)
    fixed_in = FIXED_RUNTIMES.get(key)
    if fixed_in is None:
        return Decision(False, f"runtime {runtime_name!r} not known to be safe")
    version = parse_version(runtime_version)
    if version is None:
        return Decision(False, f"{runtime_name} version {runtime_version!r} not understood")
    ok = version >= fixed_in
    wanted = ".".join(map(str, fixed_in))
    return Decision(
        ok,
        f"{runtime_name} {runtime_version} " + ("≥" if ok else "<") + f" {wanted}",
    )
