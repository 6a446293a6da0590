"""Fixtures of the version-skew tests: the two builds, this checkout and the previous release."""

from __future__ import annotations

import pytest
from skew_builds import Build, head_build, previous_release, release_build


@pytest.fixture(scope="session")
def head() -> Build:
    return head_build()


@pytest.fixture(scope="session")
def release(head: Build) -> Build:
    previous = previous_release()
    if previous is None:
        print("skew: this checkout is the only release; running HEAD against HEAD")
        return head
    return release_build(previous)
