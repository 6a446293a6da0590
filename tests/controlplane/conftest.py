"""Fixtures of the control-plane tier: one real control plane per module.

`control_plane` is module-scoped and started with the apiserver flags a module asks for through
`CONTROL_PLANE_FLAGS` (a module-level tuple); modules asking for the same flags share the running
processes (tools/controlplane.sh up is a no-op then), a module with other flags restarts them.
A module's driver is harness/driver_stack.py's: `stack` (one a test starts, closed after it) or
`running_stack` (one started for the module), on `driver_kubeconfig`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness.control_plane import ControlPlane, missing_binaries
from harness.driver_stack import DriverStack
from harness.driver_stack import driver_kubeconfig as driver_kubeconfig
from harness.driver_stack import running_stack as running_stack
from harness.driver_stack import stack as stack
from harness.tier_end import TierEnd

ROOT = Path(os.environ.get("DRACPU_CP_ROOT", "/tmp/dracpu-controlplane"))
TIER = TierEnd(Path(__file__).parent)  # the control plane stops after the tier's last test


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    TIER.after(item, nextitem)


@pytest.fixture(scope="session")
def _control_plane_session() -> Iterator[ControlPlane]:
    reason = missing_binaries()
    if reason:
        pytest.skip(reason)
    cp = ControlPlane(ROOT)
    down = TIER.at_end(cp.down)
    try:
        yield cp
    finally:
        down()


@pytest.fixture(scope="module")
def control_plane(
    request: pytest.FixtureRequest, _control_plane_session: ControlPlane
) -> ControlPlane:
    flags = tuple(getattr(request.module, "CONTROL_PLANE_FLAGS", ()))
    _control_plane_session.up(*flags)
    return _control_plane_session


@pytest.fixture
def stacks() -> Iterator[list[DriverStack]]:
    """Driver stacks a test starts, closed after it."""
    made: list[DriverStack] = []
    yield made
    for driver in made:
        driver.close()
