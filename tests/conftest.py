"""Shared pytest configuration: per-test timeouts scaled to the machine's speed like every wait
(harness.speed), property tests without a per-example deadline, and the time each test area
took, printed at the end of a run. The real-node bed (`realnode_stack`) is defined here, once, for
every folder whose tests run on it."""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path

import pytest
from harness import speed
from harness.realnode_stack import realnode_stack as realnode_stack
from hypothesis import settings

# The tests hold the placement algorithm's Python source to the kubelet (some patch its
# modules, which a compiled module would ignore); tests/allocator/test_algorithm_compiled.py
# holds the mypyc build to the source. Set before any test module imports the algorithm; the
# services the tests start inherit it.
os.environ["DRACPU_PURE_PYTHON"] = "1"

# A property holds or fails whatever the machine's speed: no example is failed for taking longer
# than hypothesis's default 200 ms (a busy 2-core machine takes that for a cheap one). A
# module's own @settings still applies on top of this.
settings.register_profile("dracpu", deadline=None)
settings.load_profile("dracpu")

_AREA_SECONDS: defaultdict[str, float] = defaultdict(float)
_MODULE_SECONDS: defaultdict[str, float] = defaultdict(float)
# A module is named in the run log when it took at least this long (the peer tiers' modules,
# where a tier's minutes go; not the local phase's hundreds of quick ones).
_LOGGED_MODULE_SECONDS = 30.0
_TESTS_ROOT = Path(__file__).parent


def _area(nodeid: str) -> str:
    parts = nodeid.split("/")
    return parts[1] if len(parts) > 2 and parts[0] == "tests" else parts[0]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _AREA_SECONDS[_area(report.nodeid)] += report.duration
    _MODULE_SECONDS[report.nodeid.split("::", 1)[0]] += report.duration


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _AREA_SECONDS:
        return
    terminalreporter.section("time per test area")
    ranked = sorted(_AREA_SECONDS.items(), key=lambda item: -item[1])
    for area, seconds in ranked:
        terminalreporter.write_line(f"{area:<16} {seconds:8.1f} s")
    # tools/run-tests.sh names a log that outlives the clone: every run's areas, for the
    # time table of docs/dev/testing.md.
    run_log = os.environ.get("DRACPU_RUN_LOG")
    if run_log and not hasattr(terminalreporter.config, "workerinput"):  # xdist's controller
        run = os.environ.get("DRACPU_RUN_ID", "-")
        lines = "".join(f"{run}\tarea\t{area}\t{seconds:.0f}\n" for area, seconds in ranked)
        lines += "".join(
            f"{run}\tmodule\t{module}\t{seconds:.0f}\n"
            for module, seconds in sorted(_MODULE_SECONDS.items(), key=lambda item: -item[1])
            if seconds >= _LOGGED_MODULE_SECONDS
        )
        try:
            with open(run_log, "a", encoding="utf-8") as log:
                log.write(lines)
        except OSError as exc:
            terminalreporter.write_line(f"(the run log {run_log} was not written: {exc})")


def pytest_report_header(config: pytest.Config) -> str:
    return f"speed factor {speed.factor():.2f} (waits and per-test timeouts scaled by it)"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test's timeout (its marker, else the ini's) is a budget on the nominal machine: on a
    slower one it grows by the same factor as the waits inside the test."""
    scale = speed.factor()
    if scale <= 1.0:
        return
    default = float(config.getini("timeout") or 0)
    for item in items:
        marker = item.get_closest_marker("timeout")
        kwargs = dict(marker.kwargs) if marker else {}
        seconds = kwargs.pop("timeout", None)
        if marker and marker.args:
            seconds = marker.args[0]
        nominal = float(seconds) if seconds is not None else default
        if nominal > 0:
            item.add_marker(pytest.mark.timeout(nominal * scale, **kwargs), append=False)
