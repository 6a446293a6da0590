"""Shared pytest configuration: the time each test area took, printed at the end of a run."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

_AREA_SECONDS: defaultdict[str, float] = defaultdict(float)
_TESTS_ROOT = Path(__file__).parent


def _area(nodeid: str) -> str:
    parts = nodeid.split("/")
    return parts[1] if len(parts) > 2 and parts[0] == "tests" else parts[0]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _AREA_SECONDS[_area(report.nodeid)] += report.duration


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _AREA_SECONDS:
        return
    terminalreporter.section("time per test area")
    for area, seconds in sorted(_AREA_SECONDS.items(), key=lambda item: -item[1]):
        terminalreporter.write_line(f"{area:<16} {seconds:8.1f} s")
