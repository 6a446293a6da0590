"""Claims placed on the guest's two NUMA nodes, as the kernel shows them: a NUMA-grouped claim's
container runs inside its node, in its cgroup (cpuset.cpus.effective) and in its process
(Cpus_allowed_list); a claim of whole-core size takes one core's two SMT threads."""

from __future__ import annotations

import pytest
from bignode.guest import Guest

from dracpu.core.cpuset import CPUSet

pytestmark = [pytest.mark.bignode, pytest.mark.realnode, pytest.mark.timeout(900)]
# The tier's core places NUMA-grouped claims through the guest's kubelet instead
# (test_bignode_cluster.py: inside one node, SMT pairs, both nodes filled); these name the
# node themselves, through the kubelet simulator.
CORE = False
CORE_BY = "the core's NUMA placements are the cluster's (test_bignode_cluster.py)"

NODE_CPUS = {0: CPUSet.parse("0-3"), 1: CPUSet.parse("4-7")}
CORES = [CPUSet.parse(pair) for pair in ("0-1", "2-3", "4-5", "6-7")]


def assert_on(seen: dict[str, str], cpus: CPUSet) -> None:
    """The kernel runs the process on exactly `cpus`, in its cgroup and in its own mask; its
    memory nodes are the ones its cgroup allows."""
    assert CPUSet.parse(seen["cpus_allowed"]) == cpus, seen
    assert CPUSet.parse(seen["cpus_effective"]) == cpus, seen
    assert seen["mems_allowed"] == seen["mems_effective"], seen


@pytest.mark.parametrize("numa", [0, 1])
def test_a_numa_grouped_claim_runs_inside_its_node_on_one_whole_core(
    node: Guest, numa: int
) -> None:
    pod = node.call("pod", name=f"numa{numa}")
    claim = node.call("claim", name=f"numa{numa}", cpus=2, pod_uid=pod["uid"], numa=numa)
    cpuset = CPUSet.parse(claim["cpuset"])
    assert claim["devices"] == [f"cpudevnuma00{numa}"]
    assert cpuset.issubset(NODE_CPUS[numa])
    assert cpuset in CORES, f"2 CPUs packed are one core's SMT pair, got {cpuset}"
    seen = node.call("container", pod_id=pod["id"], name="work", cdi=claim["cdi"])
    assert_on(seen, cpuset)
    shared = node.call("container", pod_id=pod["id"], name="shared")
    assert_on(shared, CPUSet.parse("0-7") - cpuset)


def test_claims_filling_a_node_stay_inside_it_and_the_other_node_stays_shared(
    node: Guest,
) -> None:
    pod = node.call("pod", name="fill")
    first = node.call("claim", name="fill1", cpus=3, pod_uid=pod["uid"], numa=1)
    second = node.call("claim", name="fill2", cpus=1, pod_uid=pod["uid"], numa=1)
    cpus = [CPUSet.parse(c["cpuset"]) for c in (first, second)]
    assert not cpus[0] & cpus[1]
    assert cpus[0] | cpus[1] == NODE_CPUS[1]
    for number, (made, cpuset) in enumerate(zip((first, second), cpus, strict=True)):
        assert_on(
            node.call("container", pod_id=pod["id"], name=f"c{number}", cdi=made["cdi"]), cpuset
        )
    assert_on(node.call("container", pod_id=pod["id"], name="shared"), NODE_CPUS[0])
    assert node.call("shared_pool") == "0-3"
