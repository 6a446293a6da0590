"""The kernel's isolated CPUs: device attributes, `cpuConfig.isolated` placement, the shared pool
keeping off them, and `dracpu simulate` reading them back from a gatherinfo report.

Machines: isolated-rt (1 socket, 8 cores, siblings n / n+8; CPUs 2-3,6,10-11,14 isolated and
nohz_full) and isolated-2numa (2 sockets x 4 cores, siblings n / n+8; node 1 = 4-7,12-15;
isolated 5-7,13-15, nohz_full 6-7,14-15).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dracpu.allocator import claims
from dracpu.allocator.claims import NodeState, PrepareInput, ResultInput
from dracpu.allocator.domain.devices import DeviceOptions, build_devices
from dracpu.allocator.domain.opaque import OpaqueConfig
from dracpu.core.config import DriverConfig
from dracpu.core.cpuset import CPUSet
from dracpu.core.errors import DracpuError, InsufficientCPUsError, InvalidInputError
from dracpu.core.machine import Machine
from dracpu.topology.gatherinfo import build_report, render

Machines = Callable[[str], Machine]
RT_ISOLATED = CPUSet.parse("2-3,6,10-11,14")
SIMULATE = (sys.executable, "-m", "dracpu.core.cli", "simulate")


def state_for(machine: Machine, **options: Any) -> NodeState:
    return NodeState(machine=machine, devices=build_devices(machine, DeviceOptions(**options)))


def request(uid: str, device: str, count: int, isolated: Any = None) -> PrepareInput:
    configs: tuple[OpaqueConfig, ...] = ()
    if isolated is not None:
        parameters = {"apiVersion": "v1alpha1", "cpuConfig": {"isolated": isolated}}
        configs = (OpaqueConfig("FromClaim", (), "dra.cpu", json.dumps(parameters).encode()),)
    result = ResultInput(request="req", device=device, consumed={"dra.cpu/cpu": str(count)})
    return PrepareInput(uid=uid, namespace="ns", name=uid, results=(result,), configs=configs)


# ---- attributes ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cpu", "isolated", "nohz_full"),
    [
        pytest.param(0, False, False, id="housekeeping-cpu"),
        pytest.param(2, True, True, id="isolated-cpu"),
        pytest.param(14, True, True, id="isolated-second-thread"),
        pytest.param(15, False, False, id="sibling-of-nothing-isolated"),
    ],
)
def test_individual_devices_carry_a_bool_per_cpu(
    machines: Machines, cpu: int, isolated: bool, nohz_full: bool
) -> None:
    model = build_devices(machines("isolated-rt"), DeviceOptions(mode="individual"))
    (device,) = [d for d in model.devices if d.cpus == CPUSet([cpu])]
    assert device.attributes["dra.cpu/isolated"] is isolated
    assert device.attributes["dra.cpu/nohzFull"] is nohz_full


@pytest.mark.parametrize(
    ("group_by", "reserved", "counts"),
    [
        pytest.param("numanode", "", {"cpudevnuma000": (0, 0), "cpudevnuma001": (6, 4)}, id="numa"),
        pytest.param(
            "socket", "", {"cpudevsocket000": (0, 0), "cpudevsocket001": (6, 4)}, id="socket"
        ),
        pytest.param("machine", "", {"cpudevmachine": (6, 4)}, id="machine"),
        # Reserved CPUs are not in the device, so they are not counted.
        pytest.param("machine", "7,15", {"cpudevmachine": (4, 2)}, id="machine-reserved"),
    ],
)
def test_grouped_devices_count_their_isolated_cpus(
    machines: Machines, group_by: Any, reserved: str, counts: dict[str, tuple[int, int]]
) -> None:
    options = DeviceOptions(group_by=group_by, reserved=CPUSet.parse(reserved))
    model = build_devices(machines("isolated-2numa"), options)
    got = {
        d.name: (d.attributes["dra.cpu/numIsolatedCPUs"], d.attributes["dra.cpu/numNohzFullCPUs"])
        for d in model.devices
    }
    assert got == counts


def test_a_machine_without_isolation_keeps_its_fingerprint(machines: Machines) -> None:
    machine = machines("single-4c8t")
    assert not machine.isolated and not machine.nohz_full
    # The value older releases computed for this fixture: a rolling upgrade sees no change.
    replay = Machine.from_report({"cpus": machine.to_report_cpus()})
    assert replay.fingerprint == machine.fingerprint


# ---- placement -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Placement:
    id: str
    count: int
    isolated: Any = None
    on_isolated: int | None = None  # how many of the CPUs must be isolated (None: any)
    error: type[DracpuError] | None = None
    message: str = ""


PLACEMENTS = [
    Placement("default-keeps-off-isolated", 4, on_isolated=0),
    Placement("default-falls-back-when-others-run-out", 12, on_isolated=2),
    Placement("prefer-takes-isolated", 4, "prefer", on_isolated=4),
    Placement("prefer-takes-all-isolated", 6, "prefer", on_isolated=6),
    Placement("prefer-falls-back-when-too-few", 8, "prefer"),
    Placement("require", 6, "require", on_isolated=6),
    Placement(
        "require-too-many",
        7,
        "require",
        error=InsufficientCPUsError,
        message="isolated CPUs required, 6 of them free",
    ),
    Placement("avoid", 10, "avoid", on_isolated=0),
    Placement(
        "avoid-too-many",
        11,
        "avoid",
        error=InsufficientCPUsError,
        message="isolated CPUs avoided, 10 other CPUs free",
    ),
    Placement(
        "unknown-value",
        2,
        "always",
        error=InvalidInputError,
        message="cpuConfig.isolated: 'always' is not one of prefer, require, avoid",
    ),
    Placement(
        "not-a-string",
        2,
        True,
        error=InvalidInputError,
        message="cpuConfig.isolated: true is not one of prefer, require, avoid",
    ),
]


@pytest.mark.parametrize("case", PLACEMENTS, ids=[c.id for c in PLACEMENTS])
def test_isolated_preference(machines: Machines, case: Placement) -> None:
    state = state_for(machines("isolated-rt"))
    claim = request("a", "cpudevnuma000", case.count, case.isolated)
    if case.error is not None:
        with pytest.raises(case.error) as caught:
            claims.prepare(state, claim, 1)
        assert case.message in str(caught.value)
        return
    record = claims.prepare(state, claim, 1).record
    assert len(record.cpus) == case.count
    if case.on_isolated is not None:
        assert len(record.cpus & RT_ISOLATED) == case.on_isolated
    if case.isolated:
        assert f"isolated-{case.isolated}" in record.policy


def test_isolated_preference_is_refused_with_groupby_machine(machines: Machines) -> None:
    state = state_for(machines("isolated-rt"), group_by="machine")
    parameters = {"apiVersion": "v1alpha1", "cpuConfig": {"cpuset": "2-3", "isolated": "require"}}
    claim = PrepareInput(
        uid="a",
        namespace="ns",
        name="a",
        results=(ResultInput("req", "cpudevmachine", consumed={"dra.cpu/cpu": "2"}),),
        configs=(OpaqueConfig("FromClaim", (), "dra.cpu", json.dumps(parameters).encode()),),
    )
    with pytest.raises(
        InvalidInputError, match=r"cpuConfig\.isolated is not valid with allocator external"
    ):
        claims.prepare(state, claim, 1)


# ---- the shared pool -----------------------------------------------------------------------


def test_shared_pool_keeps_off_isolated_cpus_until_nothing_else_is_free(
    machines: Machines,
) -> None:
    state = state_for(machines("isolated-rt"))
    assert state.shared == CPUSet.parse("0-15") - RT_ISOLATED
    assert not state.shared_on_isolated
    # Claims may still take isolated CPUs: they are free, only not shared.
    assert state.free == CPUSet.parse("0-15")

    state = claims.prepare(state, request("a", "cpudevnuma000", 10, "avoid"), 1).state
    assert state.shared == RT_ISOLATED
    assert state.shared_on_isolated

    state = claims.prepare(state, request("b", "cpudevnuma000", 2, "require"), 2).state
    assert state.shared == CPUSet.parse("2-3,6,10-11,14") - state.exclusive
    assert state.shared_on_isolated

    state, _ = claims.unprepare(state, "a")
    assert not state.shared & RT_ISOLATED
    assert not state.shared_on_isolated


def test_a_node_of_only_isolated_cpus_shares_them(machines: Machines) -> None:
    state = state_for(machines("isolated-all"))
    assert state.shared == CPUSet.parse("0-1")
    assert state.shared_on_isolated


# ---- dracpu simulate -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "isolated"),
    [
        pytest.param([], "", id="default"),
        pytest.param(["--isolated", "require"], "2-3,10-11", id="require"),
        pytest.param(["--isolated", "prefer"], "2-3,10-11", id="prefer"),
        pytest.param(["--isolated", "avoid"], "", id="avoid"),
    ],
)
def test_simulate_reads_isolation_from_a_report(
    machines: Machines, short_tmp: Path, flags: list[str], isolated: str
) -> None:
    machine = machines("isolated-rt")
    report = short_tmp / "report.yaml"
    report.write_text(render(build_report(machine, DriverConfig())))
    done = subprocess.run(
        [*SIMULATE, "--topology", str(report), "--count", "4", "--json", *flags],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    placed = json.loads(done.stdout)
    assert placed["isolated"] == isolated
    assert len(CPUSet.parse(placed["cpus"])) == 4


def test_simulate_refuses_an_unknown_isolation_value(short_tmp: Path) -> None:
    done = subprocess.run(
        [*SIMULATE, "--topology", "x", "--count", "1", "--isolated", "sometimes"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "invalid choice: 'sometimes'" in done.stderr
