"""The guest's real kernel: cgroup v2 with the controllers the driver needs, and the topology
the driver discovers from it equals the fixture of the same shape; the devices it publishes are
the ones that shape calls for."""

from __future__ import annotations

from pathlib import Path

import pytest
from bignode.shape import machine_shape
from harness.guest import Guest

from dracpu.topology.fixtures import MachineSpec, write_spec

pytestmark = [pytest.mark.bignode, pytest.mark.realnode, pytest.mark.timeout(900)]

# What qemu is asked for: -smp 8,sockets=2,cores=2,threads=2 and one NUMA node per socket.
# Linux numbers a socket's threads core by core there, so siblings are adjacent (0-1, 2-3, ...).
SHAPE = MachineSpec(
    "2 sockets x 2 cores x 2 threads, one NUMA node per socket, adjacent siblings",
    sockets=2,
    cores_per_socket=2,
    threads_per_core=2,
    numbering="adjacent",
)


def test_the_guest_runs_cgroup_v2_with_the_controllers_and_the_distances(guest: Guest) -> None:
    kernel = guest.call("kernel")
    assert kernel["cgroup2"]
    assert {"cpuset", "cpu", "memory", "pids"} <= set(kernel["subtree_control"])
    assert kernel["online"] == "0-7"
    assert kernel["node_cpus"] == {"0": "0-3", "1": "4-7"}
    assert kernel["distances"] == {"0": [10, 20], "1": [20, 10]}


def test_discovered_topology_equals_the_fixture_of_the_same_shape(
    guest: Guest, tmp_path: Path
) -> None:
    expected = machine_shape(str(write_spec(SHAPE, tmp_path / "sys")))
    assert guest.call("topology") == expected
    # Spelled out, so a wrong fixture generator cannot hide a wrong discovery.
    cpus = {c["cpu"]: c for c in expected["cpus"]}
    assert [cpus[n]["siblings"] for n in (0, 2, 4, 6)] == ["0-1", "2-3", "4-5", "6-7"]
    assert {cpus[n]["socket"] for n in range(4)} == {0}
    assert {cpus[n]["socket"] for n in range(4, 8)} == {1}
    assert [cpus[n]["numa_cpus"] for n in (0, 7)] == ["0-3", "4-7"]


def test_published_devices_are_one_per_numa_node_less_the_shared_floor(node: Guest) -> None:
    # groupBy numanode (the default): one device per NUMA node with its CPUs as capacity; the
    # floor of one shared CPU (minSharedCPUs) takes CPU 0, the first in device order.
    assert node.call("devices") == [
        {"name": "cpudevnuma000", "numa": 0, "capacity": 3, "cpu_ids": None},
        {"name": "cpudevnuma001", "numa": 1, "capacity": 4, "cpu_ids": None},
    ]
    assert node.call("shared_pool") == "0-7"
