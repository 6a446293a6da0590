"""One pod with several claimed containers, a sidecar started before them with a claim of its
own, and a shared container, on a node with two NUMA nodes: every container runs on exactly its
cpuset, as the guest kernel shows it in the container's cgroup v2 and its process. (A claim
belongs to one container: a second container naming it is refused at creation, which the
real-node tier checks.)"""

from __future__ import annotations

import pytest
from bignode.guest import Guest

from dracpu.core.cpuset import CPUSet

pytestmark = [pytest.mark.bignode, pytest.mark.realnode, pytest.mark.timeout(900)]


def test_several_claimed_containers_a_sidecar_and_a_shared_one_each_on_its_cpuset(
    node: Guest,
) -> None:
    pod = node.call("pod", name="multi")
    claims = {
        "sidecar": node.call("claim", name="sidecar", cpus=1, pod_uid=pod["uid"], numa=0),
        "app": node.call("claim", name="app", cpus=2, pod_uid=pod["uid"], numa=1),
        "db": node.call("claim", name="db", cpus=2, pod_uid=pod["uid"], numa=0),
        "cache": node.call("claim", name="cache", cpus=1, pod_uid=pod["uid"], numa=1),
    }
    cpus = {name: CPUSet.parse(made["cpuset"]) for name, made in claims.items()}
    claimed = CPUSet()
    for name, cpuset in cpus.items():
        assert claimed.isdisjoint(cpuset), f"{name} overlaps another claim"
        claimed |= cpuset
    containers = {
        name: node.call("container", pod_id=pod["id"], name=name, cdi=made["cdi"])
        for name, made in claims.items()
    }
    containers["shared"] = node.call("container", pod_id=pod["id"], name="shared")
    cpus["shared"] = CPUSet.parse("0-7") - claimed
    assert CPUSet.parse(node.call("shared_pool")) == cpus["shared"]
    for name, seen in containers.items():
        assert CPUSet.parse(seen["cpus_allowed"]) == cpus[name], (name, seen)
        assert CPUSet.parse(seen["cpus_effective"]) == cpus[name], (name, seen)
    for name in claims:
        env = node.call("env", container_id=containers[name]["id"])
        assert f"DRA_CPUSET_{claims[name]['uid']}={claims[name]['cpuset']}" in env
    # Read again after everything started: nobody was moved by a later container.
    for name, seen in containers.items():
        again = node.call("view", container_id=seen["id"])
        assert CPUSet.parse(again["cpus_effective"]) == cpus[name], (name, again)
