"""The previous release as an operator has it: its dist/ (chart package, image archives), made
by that release's own `tools/release.sh` from its own tree, for a test that upgrades from it.

The tree is the one the version-skew tests install (`git archive` of the release's commit in
RELEASES, its protobufs generated: skew_builds.release_build); its dist/ is kept beside it in
the cache, `$DRACPU_CACHE/release-dist-<commit>`, and made again only when its files are not
intact (release.sh's own check)."""

from __future__ import annotations

import fcntl
from pathlib import Path

from skew.skew_builds import Release, previous_release, release_build

from harness.paths import CACHE
from harness.release_dist import Dist, make_release


def previous_dist() -> tuple[Release, Dist] | None:
    """The newest release before this checkout and its dist/; None when this checkout is the
    only release. Skips the calling test when the clone lacks the release's commit."""
    release = previous_release()
    if release is None:
        return None
    source = release_source(release)
    folder = CACHE / f"release-dist-{release.commit}"
    with (CACHE / f".release-dist-{release.commit}.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one maker at a time; the others reuse its dist/
        return release, make_release(folder, tree=source)


def release_source(release: Release) -> Path:
    """The release's own tree (its docs read as its operators read them)."""
    return release_build(release).python.parents[1] / "src"
