"""Version skew, one service ahead: each of the five services from this checkout runs against
the other four from the previous release while three claims' containers keep running. Prepares
go through, new containers are pinned to their claims, the api answers, and no running
container's cpuset changes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from skew_builds import Build
from skew_runs import Run, running, visit
from skew_stack import DRIVER_SERVICES

pytestmark = [pytest.mark.skew, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def release_run(head: Build, release: Build) -> Iterator[Run]:
    yield from running(release, head)


@pytest.mark.parametrize("service", DRIVER_SERVICES)
def test_head_service_among_release(
    service: str, release_run: Run, head: Build, release: Build
) -> None:
    visit(release_run.bench, service, head, release)
