"""Version skew, one service behind: each of the five services from the previous release runs
against the other four from this checkout while three claims' containers keep running. Prepares
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
def head_run(head: Build, release: Build) -> Iterator[Run]:
    yield from running(head, head)


@pytest.mark.parametrize("service", DRIVER_SERVICES)
def test_release_service_among_head(
    service: str, head_run: Run, head: Build, release: Build
) -> None:
    visit(head_run.bench, service, release, head)
