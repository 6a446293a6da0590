"""Memory placement on a node with two NUMA nodes, as the guest kernel shows it: a claim with
`cpuConfig.memoryPlacement: local` confines its container's memory to the NUMA nodes of its
CPUs (the OCI spec's linux.resources.cpu.mems, the cgroup's cpuset.mems.effective and the
process's Mems_allowed_list agree); a claim that does not ask (the driver's default, none) and
a shared container keep both nodes. The claim spanning both nodes needs groupBy machine and
runs with the other spanning test (test_bignode_machine.py).

Hugepages of a memory device (the bed publishes memory devices, with 64 and 32 pages of 2 MiB
reserved on nodes 0 and 1): a claim's hugepages are its container's hugetlb limit, the pages
its process maps come from the claim's node, a page past the claim is refused by the kernel,
and a claim past the node's free pages is refused at prepare."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
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


MAPPER = Path(__file__).with_name("hugepages.c")
PAGE = 2 << 20


@pytest.fixture(scope="module")
def mapper(guest: Guest) -> Path:
    """The hugepage mapper (hugepages.c) built static on the host into the guest's shared
    folder, where the guest finds it as `<state>/hugepages/hugepages`: the test image is
    busybox, with nothing that can map hugepages."""
    compiler = shutil.which("gcc")
    if compiler is None:
        pytest.skip(f"bignode tier: no gcc on the host to build {MAPPER.name}")
    out = guest.shared / "hugepages"
    out.mkdir(exist_ok=True)
    subprocess.run(
        [compiler, "-static", "-O2", "-Wall", "-o", str(out / "hugepages"), str(MAPPER)],
        check=True, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    return out / "hugepages"


def test_a_claim_of_hugepages_on_node_1_limits_and_places_its_containers_pages(
    node: Guest, mapper: Path
) -> None:
    """4 CPUs and 16 pages of 2 MiB on node 1 (`dracpu dev claim --numa 1 --hugepages
    2Mi=32Mi`): the container's cgroup has hugetlb.2MB.max 32 MiB and cpuset.mems 1; its
    process maps and writes 16 pages and numa_maps finds all 16 on node 1. One page more, from
    a second process in the container, is refused by the kernel: runc sets no
    hugetlb.2MB.rsvd.max here, so the mmap succeeds and the write to the page is a SIGBUS (with
    the reservation limit set, the mmap itself would fail). A second claim of 17 pages on node
    1, allocated as by a scheduler that has not seen the first, fails at prepare with the
    allocator's line naming the node and the page size (the scheduler simulator, which has
    seen it, refuses it before)."""
    pod = node.call("pod", name="huge")
    held = node.call(
        "claim", name="huge", cpus=4, pod_uid=pod["uid"], numa=1, hugepages=["2Mi=32Mi"]
    )
    assert held["devices"] == ["cpudevnuma001", "memory-node-1"], held
    assert CPUSet.parse(held["cpuset"]) == NODE_CPUS[1], held
    seen = node.call(
        "hugepage_container", pod_id=pod["id"], name="mapper", cdi=held["cdi"], pages=16
    )
    files = seen["files"]
    assert files["hugetlb.2MB.max"] == str(16 * PAGE), seen
    assert files["hugetlb.2MB.current"] == str(16 * PAGE), seen
    assert files["cpuset.mems"] == files["cpuset.mems.effective"] == "1", seen
    assert seen["mems_allowed"] == "1", seen
    assert seen["cpus_allowed"] == seen["cpus_effective"] == held["cpuset"], seen
    assert seen["huge_pages"] == {"1": 16}, seen

    more = node.call("hugepage_exec", container_id=seen["id"], pages=1)
    assert files.get("hugetlb.2MB.rsvd.max", "max") == "max", seen
    assert (more["code"], more["output"]) == (3, "SIGBUS at page 0 of 1"), more

    stale = node.call(
        "stale_claim", name="hugemore", cpus=1, pod_uid=pod["uid"], numa=1,
        hugepages=["2Mi=34Mi"],
    )  # fmt: skip
    assert stale["scheduler"], stale
    refusal = f"claim {stale['uid']}: NUMA node 1 hugepages-2Mi: wants 34Mi, 32Mi free"
    assert refusal in stale["prepare"], stale
