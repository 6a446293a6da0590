"""Fixtures of the api tests: the services of harness.api_stack (the real topology service and
stand-ins serving harness.api_scenario, or the real pod), the api in this process or as a
process, and the whole pod of `dracpu dev up` with three claims."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from harness.api_scenario import UID_DB
from harness.api_stack import (
    ApiProcess,
    PodServices,
    ServiceSet,
    app_client,
    running_pod,
    running_services,
    start_api,
    stop_api,
)
from harness.api_stack import stack as stack  # the whole pod, for the session


@pytest.fixture(scope="module")
def services() -> Iterator[ServiceSet]:
    """Shared by a module's tests; they only read."""
    with running_services() as started:
        yield started


@pytest.fixture
def own_pod() -> Iterator[PodServices]:
    """The real services, for a test that stops them."""
    with running_pod() as started:
        started.prepare(UID_DB, "db", 4)
        yield started


@pytest.fixture
async def client(services: ServiceSet) -> AsyncIterator[httpx.AsyncClient]:
    async with app_client(services) as http:
        yield http


@pytest.fixture
def api_process(services: ServiceSet) -> Iterator[ApiProcess]:
    api = start_api(services)
    try:
        yield api
    finally:
        stop_api(api)
