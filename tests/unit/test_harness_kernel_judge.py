"""The soak's judge (harness.kernel_judge) on hand-made reads of an API server and a kernel: a
node of two NUMA groups (0-3, 4-7) as the driver publishes them by default."""

from __future__ import annotations

import time
from typing import Any

import pytest
from harness.kernel_judge import ApiView, Judge, Seen

from dracpu.core.cpuset import CPUSet

NUMA = {0: CPUSet.range(0, 3), 1: CPUSet.range(4, 7)}
T0 = 1_800_000_000.0  # 2027-01-15T08:00:00Z
BOUND = 60.0


def stamp(at: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))


def grouped_slice() -> dict[str, Any]:
    devices = [
        {
            "name": f"cpudevnuma00{n}",
            "attributes": {"resource.kubernetes.io/numaNode": {"int": n}},
            "capacity": {"dra.cpu/cpu": {"value": "4"}},
        }
        for n in NUMA
    ]
    return {
        "kind": "ResourceSlice",
        "spec": {"driver": "dra.cpu", "pool": {"name": "node"}, "devices": devices},
    }


def individual_slice() -> dict[str, Any]:
    devices = [
        {"name": f"cpudev{c:03d}", "attributes": {"dra.cpu/cpuID": {"int": c}}} for c in range(8)
    ]
    return {
        "kind": "ResourceSlice",
        "spec": {"driver": "dra.cpu", "pool": {"name": "node"}, "devices": devices},
    }


def claim(name: str, results: list[tuple[str, int | None]]) -> dict[str, Any]:
    """A claim allocated (device, CPUs consumed or None for a whole device) results."""
    return {
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {
                            "driver": "dra.cpu",
                            "pool": "node",
                            "device": device,
                            "request": "cpus",
                            **(
                                {"consumedCapacity": {"dra.cpu/cpu": str(count)}}
                                if count is not None
                                else {}
                            ),
                        }
                        for device, count in results
                    ]
                }
            }
        },
    }


def pod(
    name: str,
    claim_name: str = "",
    phase: str = "Running",
    created: float = T0,
    deleted: float | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "default",
        "uid": f"pod-{name}",
        "creationTimestamp": stamp(created),
    }
    if deleted is not None:
        meta["deletionTimestamp"] = stamp(deleted)
        meta["deletionGracePeriodSeconds"] = 0
    container: dict[str, Any] = {"name": "work"}
    spec: dict[str, Any] = {"containers": [container]}
    if claim_name:
        spec["resourceClaims"] = [{"name": "c", "resourceClaimName": claim_name}]
        container["resources"] = {"claims": [{"name": "c"}]}
    return {"kind": "Pod", "metadata": meta, "spec": spec, "status": {"phase": phase}}


def seen(pod_name: str, cpus: str, effective: str | None = None) -> Seen:
    return Seen(
        "default", pod_name, "work", 100, CPUSet.parse(cpus), CPUSet.parse(effective or cpus)
    )


def judge() -> Judge:
    return Judge(BOUND, NUMA, ("default",))


def test_a_settled_node_is_judged_settled_with_nothing_counted() -> None:
    the_judge = judge()
    api = ApiView.from_list(
        [grouped_slice(), claim("a", [("cpudevnuma001", 2)]), pod("a", "a"), pod("s")]
    )
    the_judge.sample(api, [seen("a", "4-5"), seen("s", "0-3,6-7")], T0 + 10)
    assert the_judge.unsettled == []
    assert the_judge.counts.offences() == []
    assert the_judge.acknowledged == {"uid-a": CPUSet([4, 5])}


@pytest.mark.parametrize(
    "later, counted",
    [(BOUND - 1, []), (BOUND + 1, ["off its cpuset: default/s/work: shared, on claimed CPUs 5"])],
    ids=["within-the-bound", "past-the-bound"],
)
def test_a_shared_container_on_a_claimed_cpu_counts_only_past_the_bound(
    later: float, counted: list[str]
) -> None:
    the_judge = judge()
    api = ApiView.from_list(
        [grouped_slice(), claim("a", [("cpudevnuma001", 2)]), pod("a", "a"), pod("s")]
    )
    the_judge.sample(api, [seen("a", "4-5"), seen("s", "0-3,5-7")], T0 + 10)
    the_judge.sample(api, [seen("a", "4-5"), seen("s", "0-3,5-7")], T0 + 10 + later)
    assert the_judge.unsettled == ["default/s/work: shared, on claimed CPUs 5"]
    assert the_judge.counts.offences() == counted


def test_what_is_off_says_until_when_it_may_settle_before_it_counts() -> None:
    # The fault storm ends at T0; the shared container is first seen on the claim's CPU 40 s
    # later (the claim came after the last fault): its bound runs from then, not from the
    # fault, and the soak's settle must wait that long to see it counted.
    the_judge = judge()
    the_judge.fault(T0)
    api = ApiView.from_list(
        [grouped_slice(), claim("a", [("cpudevnuma001", 2)]), pod("a", "a"), pod("s")]
    )
    the_judge.sample(api, [seen("a", "4-5"), seen("s", "0-3,6-7")], T0 + 20)
    assert (the_judge.unsettled, the_judge.settle_by) == ([], 0.0)
    the_judge.sample(api, [seen("a", "4-5"), seen("s", "0-3,5-7")], T0 + 40)
    assert the_judge.settle_by == T0 + 40 + BOUND
    the_judge.sample(api, [seen("a", "4-5"), seen("s", "0-3,5-7")], T0 + BOUND + 10)
    assert the_judge.counts.offences() == []  # past the fault's bound, not its own
    the_judge.sample(api, [seen("a", "4-5"), seen("s", "0-3,5-7")], T0 + 40 + BOUND + 1)
    assert the_judge.counts.offences() == [
        "off its cpuset: default/s/work: shared, on claimed CPUs 5"
    ]


def test_the_bound_runs_from_the_last_fault() -> None:
    the_judge = judge()
    api = ApiView.from_list([grouped_slice(), pod("s")])
    the_judge.sample(api, [seen("s", "0-7", "0-3")], T0)
    the_judge.fault(T0 + BOUND)
    the_judge.sample(api, [seen("s", "0-7", "0-3")], T0 + BOUND + 10)
    assert the_judge.counts.off_cpuset == set()
    the_judge.sample(api, [seen("s", "0-7", "0-3")], T0 + 2 * BOUND + 1)
    assert the_judge.counts.off_cpuset == {"default/s/work: Cpus_allowed_list 0-7 != cgroup 0-3"}


def test_two_pinned_claims_sharing_a_cpu_in_the_kernel_count_at_once() -> None:
    api = ApiView.from_list(
        [
            grouped_slice(),
            claim("a", [("cpudevnuma001", 2)]),
            claim("b", [("cpudevnuma001", 2)]),
            pod("a", "a"),
            pod("b", "b"),
        ]
    )
    the_judge = judge()
    the_judge.sample(api, [seen("a", "4-5"), seen("b", "5-6")], T0 + 1)
    assert the_judge.counts.cpus_in_two_claims == {"kernel: CPUs 5 in ['default/a', 'default/b']"}


@pytest.mark.parametrize(
    "slices, claims",
    [
        (
            individual_slice(),
            [claim("a", [("cpudev003", None)]), claim("b", [("cpudev003", None)])],
        ),
        (
            grouped_slice(),
            [claim("a", [("cpudevnuma000", 3)]), claim("b", [("cpudevnuma000", 2)])],
        ),
    ],
    ids=["an-individual-cpu-in-two-claims", "a-numa-group-given-past-its-cpus"],
)
def test_the_api_servers_allocations_beyond_a_device_count(
    slices: dict[str, Any], claims: list[dict[str, Any]]
) -> None:
    the_judge = judge()
    the_judge.sample(ApiView.from_list([slices, *claims]), [], T0)
    assert len(the_judge.counts.cpus_in_two_claims) == 1
    assert "['default/a', 'default/b']" in next(iter(the_judge.counts.cpus_in_two_claims))


def test_an_acknowledged_claim_pinned_elsewhere_past_the_bound_is_lost() -> None:
    the_judge = judge()
    api = ApiView.from_list([grouped_slice(), claim("a", [("cpudevnuma001", 2)]), pod("a", "a")])
    the_judge.sample(api, [seen("a", "4-5")], T0)
    the_judge.sample(api, [seen("a", "6-7")], T0 + 1)
    assert the_judge.counts.claims_lost == set()
    the_judge.sample(api, [seen("a", "6-7")], T0 + BOUND + 2)
    assert the_judge.counts.claims_lost == {"default/a (default/a/work on 6-7)"}


def test_an_acknowledged_claim_deallocated_or_its_pod_failed_is_lost() -> None:
    the_judge = judge()
    allocated = claim("a", [("cpudevnuma001", 2)])
    the_judge.sample(
        ApiView.from_list([grouped_slice(), allocated, pod("a", "a")]), [seen("a", "4-5")], T0
    )
    gone = {**allocated, "status": {}}
    the_judge.sample(ApiView.from_list([grouped_slice(), gone, pod("a", "a")]), [], T0 + 1)
    failed = pod("a", "a", phase="Failed")
    the_judge.sample(ApiView.from_list([grouped_slice(), allocated, failed]), [], T0 + 2)
    assert the_judge.counts.claims_lost == {
        "default/a (deallocated, pod default/a on, Running)",
        "default/a (pod default/a Failed: )",
    }


def test_an_allocated_claim_whose_slice_is_away_for_a_while_is_not_lost() -> None:
    # The kubelet removes a node's slices while its driver restarts; the claims stay allocated.
    the_judge = judge()
    allocated = claim("a", [("cpudevnuma001", 2)])
    the_judge.sample(
        ApiView.from_list([grouped_slice(), allocated, pod("a", "a")]), [seen("a", "4-5")], T0
    )
    the_judge.sample(ApiView.from_list([allocated, pod("a", "a")]), [seen("a", "4-5")], T0 + 1)
    assert the_judge.counts.claims_lost == set()


def test_pods_not_running_or_not_gone_past_the_bound_are_stuck() -> None:
    the_judge = judge()
    pending = pod("p", phase="Pending", created=T0)
    deleting = pod("d", created=T0, deleted=T0)
    api = ApiView.from_list([grouped_slice(), pending, deleting])
    the_judge.sample(api, [seen("d", "0-7")], T0 + BOUND - 1)
    assert the_judge.counts.pods_stuck == set()
    assert sorted(the_judge.unsettled) == [
        "default/d: deleted, still present",
        "default/p: Pending, not running ['work']",
    ]
    the_judge.sample(api, [seen("d", "0-7")], T0 + BOUND + 1)
    assert sorted(the_judge.counts.pods_stuck) == [
        "default/d (pod-d): not gone",
        "default/p (pod-p): Pending, not running ['work']",
    ]


LOST = "/kubepods/besteffort/pod1/" + "a" * 64


def lost(cpus: str) -> dict[str, dict[str, object]]:
    """A stray as the guest reports it: processes of a container the runtime lost."""
    return {LOST: {"pids": [4242], "cpus": cpus}}


def test_a_stray_on_a_claims_cpus_counts_past_the_bound() -> None:
    the_judge = judge()
    api = ApiView.from_list([grouped_slice(), claim("a", [("cpudevnuma001", 2)]), pod("a", "a")])
    running = [seen("a", "4-5")]
    the_judge.sample(api, running, T0, strays=lost("0-7"))
    assert the_judge.unsettled == [f"{LOST}: stray (pids [4242]) on claimed CPUs 4-5"]
    assert the_judge.counts.strays == set()
    the_judge.sample(api, running, T0 + BOUND + 1, strays=lost("0-7"))
    assert the_judge.counts.offences() == [
        f"stray: {LOST}: stray (pids [4242]) on claimed CPUs 4-5"
    ]
    assert the_judge.counts.as_numbers()["strays_past_bound"] == 1


def test_a_stray_on_the_shared_pool_alone_is_noted_not_counted() -> None:
    the_judge = judge()
    api = ApiView.from_list([grouped_slice(), claim("a", [("cpudevnuma001", 2)]), pod("a", "a")])
    the_judge.sample(api, [seen("a", "4-5")], T0, strays=lost("0-3"))
    the_judge.sample(api, [seen("a", "4-5")], T0 + BOUND + 1, strays=lost("0-3"))
    assert the_judge.unsettled == []
    assert the_judge.counts.offences() == []
    assert the_judge.strays_seen == {LOST}


def test_a_stray_of_a_pod_on_its_own_claim_takes_nothing_from_anybody() -> None:
    the_judge = judge()
    uid = "0f1e2d3c-aaaa-bbbb-cccc-0123456789ab"
    owner = pod("a", "a")
    owner["metadata"]["uid"] = uid
    api = ApiView.from_list([grouped_slice(), claim("a", [("cpudevnuma001", 2)]), owner])
    mine = {f"/kubepods/pod{uid}/{'b' * 64}": {"pids": [7], "cpus": "4-5"}}
    the_judge.sample(api, [seen("a", "4-5")], T0, strays=mine)
    the_judge.sample(api, [seen("a", "4-5")], T0 + BOUND + 1, strays=mine)
    assert the_judge.counts.offences() == []


def test_a_stray_gone_within_the_bound_is_not_counted_and_its_clock_starts_again() -> None:
    the_judge = judge()
    api = ApiView.from_list([grouped_slice(), claim("a", [("cpudevnuma001", 2)]), pod("a", "a")])
    the_judge.sample(api, [seen("a", "4-5")], T0, strays=lost("4"))
    the_judge.sample(api, [seen("a", "4-5")], T0 + 10, strays={})
    assert the_judge.unsettled == []
    the_judge.sample(api, [seen("a", "4-5")], T0 + BOUND + 1, strays=lost("4"))
    assert the_judge.counts.strays == set()  # seen again just now: its bound runs from now


def test_a_container_of_a_pod_the_api_server_no_longer_lists_is_a_stray() -> None:
    the_judge = judge()
    api = ApiView.from_list([grouped_slice(), claim("a", [("cpudevnuma001", 2)]), pod("a", "a")])
    running = [seen("a", "4-5"), seen("gone", "5-6")]
    the_judge.sample(api, running, T0)
    the_judge.sample(api, running, T0 + BOUND + 1)
    assert the_judge.counts.offences() == [
        "stray: default/gone/work: stray (its pod not in the API server) on claimed CPUs 5"
    ]
