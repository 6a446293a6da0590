"""Memory placement on a node with two NUMA nodes, as the guest kernel shows it: a claim with
`cpuConfig.memoryPlacement: local` confines its container's memory to the NUMA nodes of its
CPUs (the OCI spec's linux.resources.cpu.mems, the cgroup's cpuset.mems.effective and the
process's Mems_allowed_list agree); a claim that does not ask (the driver's default, none) and
a shared container keep both nodes. The claim spanning both nodes needs groupBy machine and
runs with the other spanning test (test_bignode_machine.py)."""

from __future__ import annotations

from typing import Any

import pytest
from harness.guest import Guest

from dracpu.core.cpuset import CPUSet

pytestmark = [pytest.mark.bignode, pytest.mark.realnode, pytest.mark.timeout(900)]

NODE_CPUS = {0: CPUSet.parse("0-3"), 1: CPUSet.parse("4-7")}
EVERY_NODE = "0-1"


def assert_memory_on(seen: dict[str, Any], mems: str, spec: str) -> None:
    """The kernel lets the process allocate from exactly the nodes `mems`, in its own mask and
    in its cgroup; containerd created it with `spec` as linux.resources.cpu.mems ("": unset)."""
    assert seen["mems_allowed"] == mems, seen
    assert seen["mems_effective"] == mems, seen
    assert seen["spec_mems"] == spec, seen


def test_a_local_claim_on_node_1_allocates_only_there_and_the_others_keep_both_nodes(
    node: Guest,
) -> None:
    pod = node.call("pod", name="mem")
    local = node.call(
        "claim", name="memlocal", cpus=2, pod_uid=pod["uid"], numa=1, memory_placement="local"
    )
    plain = node.call("claim", name="memplain", cpus=1, pod_uid=pod["uid"], numa=0)
    assert CPUSet.parse(local["cpuset"]).issubset(NODE_CPUS[1])
    assert CPUSet.parse(plain["cpuset"]).issubset(NODE_CPUS[0])
    placed = node.call("container", pod_id=pod["id"], name="placed", cdi=local["cdi"])
    unplaced = node.call("container", pod_id=pod["id"], name="unplaced", cdi=plain["cdi"])
    shared = node.call("container", pod_id=pod["id"], name="shared")

    assert placed["cpus_allowed"] == placed["cpus_effective"] == local["cpuset"], placed
    assert_memory_on(placed, "1", spec="1")
    assert unplaced["cpus_allowed"] == unplaced["cpus_effective"] == plain["cpuset"], unplaced
    assert_memory_on(unplaced, EVERY_NODE, spec="")
    assert_memory_on(shared, EVERY_NODE, spec="")
    # Read again after the others started: the placed container's nodes held.
    assert_memory_on(node.call("view", container_id=placed["id"]), "1", spec="1")


def test_one_container_with_a_local_claim_on_each_node_allocates_from_both(node: Guest) -> None:
    pod = node.call("pod", name="memboth")
    claims = [
        node.call(
            "claim", name=f"memon{n}", cpus=1, pod_uid=pod["uid"], numa=n, memory_placement="local"
        )
        for n in (0, 1)
    ]
    cpus = CPUSet.parse(claims[0]["cpuset"]) | CPUSet.parse(claims[1]["cpuset"])
    seen = node.call(
        "container", pod_id=pod["id"], name="both", cdi=claims[0]["cdi"] + claims[1]["cdi"]
    )
    assert CPUSet.parse(seen["cpus_allowed"]) == CPUSet.parse(seen["cpus_effective"]) == cpus
    assert_memory_on(seen, EVERY_NODE, spec=EVERY_NODE)
