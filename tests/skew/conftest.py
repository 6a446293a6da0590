"""Fixtures of the version-skew tests: this checkout, and each earlier release of RELEASES in
turn (`release` is parametrized over them, its id the release's tag; each is installed once
into a venv cached by its commit)."""

from __future__ import annotations

import pytest
from skew_builds import Build, Release, earlier_releases, head_build, release_build

EARLIER: list[Release | None] = [*earlier_releases()] or [None]


@pytest.fixture(scope="session")
def head() -> Build:
    return head_build()


@pytest.fixture(
    scope="session",
    params=EARLIER,
    ids=[r.tag if r is not None else "HEAD-only" for r in EARLIER],
)
def release(request: pytest.FixtureRequest, head: Build) -> Build:
    earlier: Release | None = request.param
    if earlier is None:
        print("skew: this checkout is the only release; running HEAD against HEAD")
        return head
    return release_build(earlier)
