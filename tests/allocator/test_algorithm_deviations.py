"""Where `take_cpus` deliberately differs from the kubelet's Go code (see
docs ALGORITHM-NOTES.md): input validation, physical core identity, asymmetric machines and the
termination of the NUMA-distributed take. Each case would go wrong upstream."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

from dracpu.allocator.algorithm import Policy, take_cpus
from dracpu.core.cpuset import CPUSet
from dracpu.core.errors import InsufficientCPUsError, InvalidInputError
from dracpu.core.machine import CPUInfo, Machine


def machine(cores: Iterable[tuple[int, int, int, tuple[int, ...]]], uncore: int = -1) -> Machine:
    """Cores as (socket, numa, core_id, thread cpu ids)."""
    return Machine.build(
        CPUInfo(
            cpu_id=cpu,
            core_id=core_id,
            socket_id=socket,
            numa_node_id=numa,
            uncore_cache_id=uncore,
        )
        for socket, numa, core_id, threads in cores
        for cpu in threads
    )


# 2 sockets x 2 cores x 2 adjacent threads; sysfs core ids restart at 0 in every socket.
PER_SOCKET_CORE_IDS = machine(
    [(0, 0, 0, (0, 1)), (0, 0, 1, (2, 3)), (1, 1, 0, (4, 5)), (1, 1, 1, (6, 7))]
)
# One socket, 2 cores, the second core's sibling (CPU 3) offline.
OFFLINE_SIBLING = machine([(0, 0, 0, (0, 1)), (0, 0, 1, (2,))])
SMT2 = machine([(0, 0, c, (c, c + 4)) for c in range(4)])


@pytest.mark.parametrize(
    ("count", "policy", "message"),
    [
        pytest.param(0, Policy(), "must be positive", id="zero-cpus"),
        pytest.param(-2, Policy(), "must be positive", id="negative-count"),
        pytest.param(True, Policy(), "must be an integer", id="bool-count"),
        pytest.param(2, Policy(group_size=0), "group size must be positive", id="group-size-0"),
        pytest.param(2, Policy(group_size=-1), "group size must be positive", id="group-size-neg"),
        pytest.param(
            2,
            Policy(strategy="diagonal"),
            "unknown strategy",
            id="unknown-strategy",  # type: ignore[arg-type]
        ),
        pytest.param(
            2,
            Policy(strategy="spread", full_pcpus_only=True),
            "cannot be combined",
            id="spread-with-full-pcpus",
        ),
        pytest.param(
            6,
            Policy(full_pcpus_only=True, distribute_numa=True, group_size=3),
            "group size 3 splits physical cores of 2 threads",
            id="full-pcpus-group-splits-cores",
        ),
    ],
)
def test_malformed_requests_are_rejected(count: Any, policy: Policy, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        take_cpus(SMT2, SMT2.cpu_set, count, policy)


@pytest.mark.parametrize(
    ("available", "count", "policy", "message"),
    [
        pytest.param("0-2", 4, Policy(), "want 4, 3 free \\(0-2\\)", id="too-few-cpus"),
        pytest.param("", 1, Policy(), "want 1, none free", id="nothing-free"),
        pytest.param(
            "0-7",
            3,
            Policy(full_pcpus_only=True),
            "cannot place 3 CPUs on whole physical cores: each core has 2 threads",
            id="full-pcpus-odd-count",
        ),
        pytest.param(
            "0-2,4",
            4,
            Policy(full_pcpus_only=True),
            "want 4 CPUs \\(2 cores\\), 2 CPUs are free in whole cores; 4 free",
            id="too-few-whole-cores",
        ),
    ],
)
def test_unmet_requests_say_what_was_wanted_and_what_is_free(
    available: str, count: int, policy: Policy, message: str
) -> None:
    with pytest.raises(InsufficientCPUsError, match=message):
        take_cpus(SMT2, CPUSet.parse(available), count, policy)


@pytest.mark.parametrize(
    ("target", "available", "count", "policy", "expect"),
    [
        # Upstream matches cores by core id alone and takes "core 0" of both sockets: 4 CPUs,
        # two of them busy. A core is (socket, cluster, core id) here.
        pytest.param(PER_SOCKET_CORE_IDS, "0-2,6", 2, Policy(), "0-1", id="core-id-per-socket"),
        pytest.param(
            PER_SOCKET_CORE_IDS,
            "0-2,6",
            2,
            Policy(distribute_numa=True),
            "0-1",
            id="core-id-per-socket-distributed",
        ),
        # Upstream's "free core" test compares with CPUs ÷ cores = 1 here, so core 0 with only
        # CPU 1 free looks whole and both its threads are taken, CPU 0 included.
        pytest.param(OFFLINE_SIBLING, "1-2", 2, Policy(), "1-2", id="offline-sibling"),
        # A core whose other thread is offline is a whole core on its own.
        pytest.param(
            OFFLINE_SIBLING,
            "0-2",
            1,
            Policy(align_uncore=False),
            "2",
            id="offline-sibling-core-is-whole",
        ),
        # CPUs the machine does not have (offline) are never handed out.
        pytest.param(SMT2, "0-1,4,9-12", 3, Policy(), "0-1,4", id="unknown-cpus-ignored"),
    ],
)
def test_answers_stay_inside_the_free_cpus(
    target: Machine, available: str, count: int, policy: Policy, expect: str
) -> None:
    assert take_cpus(target, CPUSet.parse(available), count, policy) == CPUSet.parse(expect)


def test_distributed_take_counts_whole_groups() -> None:
    """4 NUMA nodes of 8 two-thread cores; 15, 15, 15 and 12 CPUs free; 54 CPUs in groups of 2.

    Every node gets 12; 6 remain. Upstream accepts the pair of nodes 0 and 1 for them because
    their 3 + 3 free CPUs cover 6, then loops forever handing out pairs neither has. Counted in
    whole groups only the three-node remainder fits: 14, 14, 14 and 12 CPUs.
    """
    numa = machine(
        (node // 2, node, core, (node * 8 + core, 32 + node * 8 + core))
        for node in range(4)
        for core in range(8)
    )
    busy = CPUSet([0, 8, 16, 24, 25, 26, 27])
    available = numa.cpu_set - busy
    result = take_cpus(numa, available, 54, Policy(distribute_numa=True, group_size=2))
    assert result.issubset(available)
    per_node = [len(result & cpus) for cpus in numa.numa_nodes.values()]
    assert per_node == [14, 14, 14, 12]


@pytest.mark.parametrize(
    ("available", "count", "expect"),
    [
        # Without any cache grouping these would be 7,12,15 / 1,3,9,11 / 4,8,12.
        pytest.param("1-3,5,7-9,11-12,15", 3, "1,8-9", id="three-cpus"),
        pytest.param("1,3-7,9-13,15", 4, "4-5,12-13", id="four-cpus"),
        pytest.param("4,7-9,11-12,14-15", 3, "4,12,14", id="odd-count-trims-a-thread"),
    ],
)
def test_unknown_uncore_caches_count_as_one_per_socket(
    available: str, count: int, expect: str
) -> None:
    """Like the kubelet when cadvisor reports no L3 cache, CPUs of unknown cache (-1) share
    one per socket (2 sockets x 4 cores, sibling = cpu + 8): the same answers as with the
    socket id given as cache id."""
    cores = [(s, s, c, (s * 4 + c, 8 + s * 4 + c)) for s in range(2) for c in range(4)]
    unknown = machine(cores)
    per_socket = Machine.build(
        CPUInfo(
            cpu_id=cpu,
            core_id=core_id,
            socket_id=socket,
            numa_node_id=numa,
            uncore_cache_id=socket,
        )
        for socket, numa, core_id, threads in cores
        for cpu in threads
    )
    cpus = CPUSet.parse(available)
    assert take_cpus(unknown, cpus, count) == CPUSet.parse(expect)
    assert take_cpus(per_socket, cpus, count) == CPUSet.parse(expect)
