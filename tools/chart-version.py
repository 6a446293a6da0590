"""Prints the chart's version for a release version: helm wants Semantic Versioning, the
Python distribution (pyproject.toml, where the version is written) PEP 440. A final release is
spelt the same in both; a release candidate and a development version are spelt again, so that
both orders agree (X.Y.Z.devN < X.Y.ZrcN < X.Y.Z):

    0.3.0        -> 0.3.0
    0.3.0rc1     -> 0.3.0-rc.1
    0.3.0.dev0   -> 0.3.0-dev.0

    tools/chart-version.py VERSION

Any other version (alpha, beta, a release candidate's development version, a post-release, a
local version) is one error line and exit 2: its Semantic Versioning spelling would not order as
PEP 440 does ("alpha" sorts before "dev", "rc.1.dev.2" after "rc.1").
"""

from __future__ import annotations

import re
import sys

PEP440 = re.compile(r"^(?P<release>\d+\.\d+\.\d+)(?:rc(?P<rc>\d+)|\.dev(?P<dev>\d+))?$")


class VersionError(ValueError):
    """The release version has no Semantic Versioning spelling here."""


def chart_version(version: str) -> str:
    """`version` (PEP 440, canonical) in Semantic Versioning."""
    found = PEP440.match(version)
    if not found:
        raise VersionError(f"{version!r} is not MAJOR.MINOR.PATCH, optionally with rcN or .devN")
    if found["rc"] is not None:
        return f"{found['release']}-rc.{found['rc']}"
    if found["dev"] is not None:
        return f"{found['release']}-dev.{found['dev']}"
    return found["release"]


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: chart-version.py VERSION", file=sys.stderr)
        return 2
    try:
        print(chart_version(argv[0]))
    except VersionError as error:
        print(f"chart-version: error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
