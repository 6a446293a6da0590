"""Fixtures of the real-node tier (the bed itself: harness/realnode_stack.py, one per session)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from harness.realnode_stack import Stack


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    report = yield
    if report.when == "call" and report.failed:
        item.rep_call_failed = True  # type: ignore[attr-defined]
        for parent in item.listchain():
            parent.rep_call_failed = True  # type: ignore[attr-defined]
    return report


@pytest.fixture(scope="session")
def stack(realnode_stack: Stack) -> Stack:
    """The session's real-node bed (tests/conftest.py), which the tier's tests call `stack`."""
    return realnode_stack
