"""How many ResourceSlice writes a node's changes cost, per layout, on a 1,024-CPU machine
(2 sockets x 256 SMT cores, 8 NUMA nodes): the allocator's published devices after a claim is
prepared, after it is released and after a CPU goes offline, planned against the slices the
previous state left (pure; the publisher writes exactly the plan's deletes, updates and
creates).

A claim and its release write nothing in any layout: the scheduler keeps the allocations, the
devices stay as they are. A CPU going offline changes one device: a grouped layout rewrites
the one slice holding it; the individual layout drops that CPU's device, which moves every later
device down a place in the chunks, so every slice from the dropped device on changes and the
pool's generation moves, and then all the node's slices are rewritten.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from typing import Any

import pytest
from harness.published import chunk_devices
from harness.scale import Layout, discover_machine, layout_options, published_model

from dracpu.allocator import claims
from dracpu.allocator.claims import NodeState, PrepareInput, ResultInput
from dracpu.allocator.claims.state import retopologize
from dracpu.allocator.domain.device_health import HealthBook
from dracpu.allocator.domain.devices import build_devices
from dracpu.allocator.rpc.wire import device_list
from dracpu.core.driver import CPU_CAPACITY, DRIVER_NAME
from dracpu.core.machine import Machine
from dracpu.dra_plugin.publishing.slices import Owner, Plan, plan
from dracpu.topology.fixtures import FIXTURES

NODE = "big"
OWNER = Owner(NODE, "uid-big")
OFFLINE_CPU = 700  # the sibling of CPU 188: socket 0, NUMA node 1


@functools.cache
def machine(offline: tuple[int, ...] = ()) -> Machine:
    return discover_machine(dataclasses.replace(FIXTURES["big-1024"], offline=offline))


class Server:
    """The node's slices as the API server holds them, a plan applied at a time."""

    def __init__(self) -> None:
        self.slices: dict[str, dict[str, Any]] = {}
        self.names = itertools.count()

    def sync(self, state: NodeState) -> Plan:
        devices = device_list(published_model(state), 1, HealthBook())
        todo = plan(
            list(self.slices.values()),
            chunk_devices(devices),
            driver=DRIVER_NAME,
            node=NODE,
            pool=NODE,
            owner=OWNER,
        )
        for gone in todo.delete:
            del self.slices[gone["metadata"]["name"]]
        for updated in todo.update:
            self.slices[updated["metadata"]["name"]] = updated
        for created in todo.create:
            name = f"{created['metadata']['generateName']}{next(self.names)}"
            self.slices[name] = dict(created, metadata={**created["metadata"], "name": name})
        return todo


def writes(todo: Plan) -> int:
    return len(todo.delete) + len(todo.update) + len(todo.create)


def claim_results(layout: Layout, state: NodeState) -> tuple[ResultInput, ...]:
    """Eight CPUs as the scheduler would allocate them: eight individual devices of NUMA node
    1, or eight `dra.cpu/cpu` of the device holding it."""
    if layout == "individual":
        devices = [d for d in state.devices.devices if d.cpus.issubset(machine().numa_nodes[1])][:8]
        return tuple(ResultInput(request="cpus", device=d.name, pool=NODE) for d in devices)
    device = "cpudevnuma001" if layout == "numanode" else "cpudevsocket000"
    return (ResultInput(request="cpus", device=device, pool=NODE, consumed={CPU_CAPACITY: "8"}),)


def slice_writes(layout: Layout) -> dict[str, int]:
    options = layout_options(layout)
    state = NodeState(machine=machine(), devices=build_devices(machine(), options))
    server = Server()
    counts = {"publish": writes(server.sync(state))}
    request = PrepareInput(
        uid="claim-1", namespace="ns", name="claim-1", results=claim_results(layout, state)
    )
    state = claims.prepare(state, request, 1).state
    assert "claim-1" in state.records
    counts["claim"] = writes(server.sync(state))
    state, record = claims.unprepare(state, "claim-1")
    assert record is not None
    counts["release"] = writes(server.sync(state))
    smaller = machine((OFFLINE_CPU,))
    state = retopologize(state, smaller, build_devices(smaller, options))
    counts["offline"] = writes(server.sync(state))
    counts["slices"] = len(server.slices)
    return counts


@pytest.mark.parametrize(
    ("layout", "expected"),
    [
        # 1,023 individual devices (minSharedCPUs keeps CPU 0): 8 slices of at most 128.
        ("individual", {"publish": 8, "claim": 0, "release": 0, "offline": 8, "slices": 8}),
        ("numanode", {"publish": 1, "claim": 0, "release": 0, "offline": 1, "slices": 1}),
        ("socket", {"publish": 1, "claim": 0, "release": 0, "offline": 1, "slices": 1}),
    ],
)
def test_slice_writes_per_change(layout: Layout, expected: dict[str, int]) -> None:
    assert slice_writes(layout) == expected


def test_an_unchanged_node_writes_nothing() -> None:
    options = layout_options("individual")
    state = NodeState(machine=machine(), devices=build_devices(machine(), options))
    server = Server()
    server.sync(state)
    assert server.sync(state).empty
