"""The kubelet's own tables for its CPU assignment algorithm, run against `take_cpus`.

Cases and topologies are transcribed from kubernetes pkg/kubelet/cm/cpumanager
cpu_assignment_test.go and policy_test.go (as copied in kubernetes-sigs/dra-driver-cpu
pkg/cpumanager/), and from the Go reference driver's grouped-mode prepare tests
(pkg/driver/dra_hooks_test.go), into kubelet_cases/. Where this driver deliberately differs
(a count of zero is rejected instead of returning nothing), the test says so.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from dracpu.allocator.algorithm import Policy, take_cpus
from dracpu.allocator.algorithm.accumulator import Accumulator
from dracpu.allocator.algorithm.topology_index import index_for
from dracpu.core.cpuset import CPUSet
from dracpu.core.errors import InsufficientCPUsError, InvalidInputError
from dracpu.core.machine import Machine

CASES_DIR = Path(__file__).parent / "kubelet_cases"
CASE_FILES = (
    "cpu_assignment_cases.json",
    "kubelet_policy_cases.json",
    "reference_driver_cases.json",
)
DOCUMENTS = [json.loads((CASES_DIR / name).read_text()) for name in CASE_FILES]


@cache
def topology(name: str) -> Machine:
    document = json.loads((CASES_DIR / "topologies" / f"{name}.json").read_text())
    return Machine.from_report(document, name)


def table(name: str) -> list[Any]:
    return [
        pytest.param(case, id=case["id"])
        for document in DOCUMENTS
        for case in document.get(name, [])
    ]


def policy_of(case: dict[str, Any]) -> Policy:
    return Policy(
        strategy=case["strategy"],
        align_uncore=case["alignUncore"],
        distribute_numa=case.get("distributeNUMA", False),
        group_size=case.get("groupSize", 1),
        full_pcpus_only=case.get("fullPCPUsOnly", False),
    )


@pytest.mark.parametrize(
    "case",
    table("packed")
    + table("spread")
    + table("distributed")
    + table("grouped")
    + table("staticPolicy"),
)
def test_take_matches_kubelet(case: dict[str, Any]) -> None:
    machine = topology(case["topology"])
    available = CPUSet.parse(case["available"])
    if case["count"] == 0:
        # Upstream returns an empty set for zero CPUs; a request for nothing is a caller bug.
        with pytest.raises(InvalidInputError, match="must be positive"):
            take_cpus(machine, available, case["count"], policy_of(case))
    elif "goError" in case:
        with pytest.raises(InsufficientCPUsError, match=f"want {case['count']}, "):
            take_cpus(machine, available, case["count"], policy_of(case))
    else:
        result = take_cpus(machine, available, case["count"], policy_of(case))
        assert result == CPUSet.parse(case["expect"])


@pytest.mark.parametrize("case", table("fullPCPUsOnly"))
def test_full_pcpus_only_matches_kubelet(case: dict[str, Any]) -> None:
    machine = topology(case["topology"])
    available = CPUSet.parse(case["available"])
    if "expect" in case:
        assert take_cpus(machine, available, case["count"], policy_of(case)) == CPUSet.parse(
            case["expect"]
        )
    elif "CausedByPhysicalCPUs" in case["goError"]:
        with pytest.raises(InsufficientCPUsError, match="not enough whole physical cores"):
            take_cpus(machine, available, case["count"], policy_of(case))
    else:
        # The request can never be whole cores on this machine, whatever is free.
        with pytest.raises(InsufficientCPUsError, match="each core has"):
            take_cpus(machine, available, case["count"], policy_of(case))


@pytest.mark.parametrize("case", table("topologyAware"))
def test_static_policy_takes_match_kubelet(case: dict[str, Any]) -> None:
    """The static policy first takes from the hinted socket, then the rest from elsewhere."""
    machine = topology(case["topology"])
    for step in case["steps"]:
        result = take_cpus(machine, CPUSet.parse(step["available"]), step["count"], policy_of(case))
        assert result == CPUSet.parse(step["expect"])


def free_groups(acc: Accumulator, order: list[int], masks: dict[int, int]) -> list[int]:
    return [g for g in order if acc.free & masks[g] == masks[g]]


@pytest.mark.parametrize("case", table("orderings"))
def test_orderings_match_kubelet(case: dict[str, Any]) -> None:
    index = index_for(topology(case["topology"]))
    acc = Accumulator(index, CPUSet.parse(case["available"]).mask, 0)
    if "freeSockets" in case:
        sockets = free_groups(acc, acc.sorted_sockets(), index.socket_masks)
        # Upstream sorts the socket list before comparing in the sockets-only table.
        if "freeNUMANodes" not in case:
            sockets.sort()
        assert sockets == case["freeSockets"]
    if "freeNUMANodes" in case:
        assert free_groups(acc, acc.sorted_numa_nodes(), index.numa_masks) == case["freeNUMANodes"]
    if "freeCores" in case:
        # Upstream names a core by its first CPU in these topologies; cores here are numbered
        # by that same order, so compare first CPUs.
        cores = free_groups(acc, acc.sorted_cores(), dict(enumerate(index.core_masks)))
        firsts = [CPUSet.from_mask(index.core_masks[c]).first() for c in cores]
        assert firsts == case["freeCores"]
    if "freeCPUs" in case:
        assert acc.sorted_cpus_packed() == case["freeCPUs"]
