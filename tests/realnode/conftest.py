"""Fixtures of the real-node tier (the bed itself: harness/realnode_stack.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from harness.realnode_stack import Stack, finish_stack, start_stack


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    report = yield
    if report.when == "call" and report.failed:
        item.rep_call_failed = True  # type: ignore[attr-defined]
        for parent in item.listchain():
            parent.rep_call_failed = True  # type: ignore[attr-defined]
    return report


@pytest.fixture(scope="session")
def stack(request: pytest.FixtureRequest) -> Iterator[Stack]:
    """One containerd (newest version) + services shared by the tier's tests; each test
    removes its pods and releases its claims, leaving it as it found it."""
    started = start_stack()
    yield started
    finish_stack(started, getattr(request.node, "rep_call_failed", False))
