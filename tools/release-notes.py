"""Prints one release's section of CHANGELOG.md (Keep a Changelog: `## [<version>] - <date>`),
its heading first, down to the next release's heading or the link references at the end. A
development version (X.Y.Z.devN, what the tree says between releases) has no section of its
own: its notes are the `## [Unreleased]` section, under the heading `## [X.Y.Z.devN] -
unreleased`.

    tools/release-notes.py VERSION [CHANGELOG]

A version without a section, or with an empty one, is one error line and exit 2: a release
always says what changed.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

CHANGELOG = Path(__file__).resolve().parent.parent / "CHANGELOG.md"
HEADING = re.compile(r"^## \[(?P<version>[^\]]+)\]")
LINK_REFERENCE = re.compile(r"^\[[^\]]+\]: ")
DEVELOPMENT = re.compile(r"\.dev\d+$")
UNRELEASED = "Unreleased"


class NotesError(Exception):
    """The changelog has no usable section for the version."""


def section(text: str, version: str) -> str:
    """The section of `version`, heading included, without trailing blank lines."""
    lines = text.splitlines()
    versions = [m["version"] if (m := HEADING.match(line)) else None for line in lines]
    wanted = UNRELEASED if DEVELOPMENT.search(version) else version
    start = versions.index(wanted) if wanted in versions else None
    if start is None:
        known = [v for v in versions if v is not None]
        raise NotesError(f"no section '## [{wanted}]' (it has: {', '.join(known) or 'none'})")
    end = start + 1
    while end < len(lines) and versions[end] is None and not LINK_REFERENCE.match(lines[end]):
        end += 1
    body = "\n".join(lines[start + 1 : end]).strip()
    if not body:
        raise NotesError(f"the section '## [{wanted}]' is empty")
    heading = lines[start] if wanted == version else f"## [{version}] - unreleased"
    return f"{heading}\n\n{body}\n"


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2):
        print("usage: release-notes.py VERSION [CHANGELOG]", file=sys.stderr)
        return 2
    path = Path(argv[1]) if len(argv) == 2 else CHANGELOG
    try:
        sys.stdout.write(section(path.read_text(encoding="utf-8"), argv[0]))
    except (NotesError, OSError) as error:
        print(f"release-notes: error: {path}: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
