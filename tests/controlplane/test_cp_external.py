"""The external allocator's attributes in front of a real kube-apiserver: every fixture machine,
in every grouping, publishes `dra.cpu/cpuIDs` and `dra.cpu/smtLayout` that the server accepts
as they are; a machine whose layout V1 cannot say publishes nothing."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from controlplane.checks import complete, devices, slices
from harness.control_plane import ControlPlane
from harness.driver_stack import DriverStack
from harness.published import decode_smt_layout
from harness.services import ServiceExited
from harness.waits import wait_for

from dracpu.allocator.domain.devices import DeviceOptions, GroupBy, build_devices
from dracpu.core.cpuset import CPUSet
from dracpu.core.driver import ATTR_CPU_IDS, ATTR_SMT_LAYOUT
from dracpu.core.machine import Machine
from dracpu.core.names import MAX_ATTRIBUTE_VALUE
from dracpu.topology.discovery import discover
from dracpu.topology.fixtures import FIXTURES, write_fixture

pytestmark = [pytest.mark.controlplane, pytest.mark.timeout(600)]

GROUPINGS: tuple[GroupBy, ...] = ("numanode", "socket", "machine")
# V1 covers 2-way SMT only: the allocator refuses these at start.
INEXPRESSIBLE = {"smt4"}


def fixture_machine(name: str) -> Machine:
    root = Path(tempfile.mkdtemp(prefix="cpx", dir="/tmp"))
    try:
        return discover(write_fixture(name, root))
    finally:
        shutil.rmtree(root, ignore_errors=True)


def expected_attributes(machine: Machine, group_by: GroupBy) -> dict[str, dict[str, Any]]:
    """The two attributes of every device as the device model has them, in API spelling."""
    model = build_devices(machine, DeviceOptions(group_by=group_by, allocator="external"))
    return {
        d.name: {a: {"string": d.attributes[a]} for a in (ATTR_CPU_IDS, ATTR_SMT_LAYOUT)}
        for d in model.devices
    }


def _published(
    control_plane: ControlPlane, node: str, count: int
) -> Callable[[], list[dict[str, Any]] | None]:
    def check() -> list[dict[str, Any]] | None:
        found = slices(control_plane, node)
        return found if found and complete(found, count) else None

    return check


@pytest.mark.parametrize("fixture", sorted(set(FIXTURES) - INEXPRESSIBLE))
async def test_every_fixture_in_every_grouping_is_accepted(
    control_plane: ControlPlane, stacks: list[DriverStack], fixture: str
) -> None:
    machine = fixture_machine(fixture)
    expected = {g: expected_attributes(machine, g) for g in GROUPINGS}
    for group_by in GROUPINGS:
        node = f"ext-{fixture}-{group_by}"
        control_plane.register_node(node, cpus=len(machine.cpus))
        config = {"cpuDeviceMode": "grouped", "groupBy": group_by, "allocator": "external"}
        stacks.append(DriverStack(node, control_plane.kubeconfig, fixture=fixture, config=config))
    await asyncio.gather(*(stack.start() for stack in stacks))
    for stack, group_by in zip(stacks, GROUPINGS, strict=True):
        want = expected[group_by]
        found = wait_for(
            _published(control_plane, stack.node, len(want)),
            f"{fixture} {group_by} slices in the API server",
            timeout=90,
            interval=0.2,
        )
        published = {
            d["name"]: {a: d["attributes"][a] for a in (ATTR_CPU_IDS, ATTR_SMT_LAYOUT)}
            for d in devices(found)
        }
        assert published == want
        for device in devices(found):
            cpu_ids = device["attributes"][ATTR_CPU_IDS]["string"]
            layout = device["attributes"][ATTR_SMT_LAYOUT]["string"]
            assert len(cpu_ids) <= MAX_ATTRIBUTE_VALUE and len(layout) <= MAX_ATTRIBUTE_VALUE
            assert CPUSet.parse(cpu_ids) and len(CPUSet.parse(cpu_ids)) == int(
                device["capacity"]["dra.cpu/cpu"]["value"]
            )
            pairs, alone = decode_smt_layout(layout)
            assert CPUSet(c for p in pairs for c in p) | alone == machine.online
        status = await stack.status()
        assert status.last_publish_error == ""


async def test_a_layout_v1_cannot_express_stops_the_allocator_before_any_slice(
    control_plane: ControlPlane, stacks: list[DriverStack]
) -> None:
    node = "ext-smt4"
    control_plane.register_node(node, cpus=32)
    config = {"groupBy": "numanode", "allocator": "external"}
    stack = DriverStack(node, control_plane.kubeconfig, fixture="smt4", config=config)
    stacks.append(stack)
    with pytest.raises(ServiceExited, match=r"allocator exited with 2 before serving"):
        await stack.start()
    lines = [line for line in stack.log("allocator").read_text().splitlines() if line.strip()]
    assert lines[-1] == (
        "dracpu-allocator: error: device cpudevnuma000: dra.cpu/smtLayout: the V1 encoding "
        "covers 2-way SMT only, CPUs 0-3 are 4 threads of one core"
    )
    assert slices(control_plane, node) == []
