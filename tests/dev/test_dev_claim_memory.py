"""`dracpu dev claim --memory-placement`: the claim it writes carries the choice as the
driver reads it, the claim's opaque cpuConfig.memoryPlacement (next to --cpuset, in one
configuration). `--memory` and `--hugepages`: the claim it writes asks for the memory as a
claim of the chart's memory DeviceClass does, and is allocated the memory device of its CPUs'
NUMA node with the amounts as consumed capacity."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dracpu.allocator.domain.memory_flags import memory_flags
from dracpu.core.cpuset import CPUSet
from dracpu.core.errors import InsufficientMemoryError
from dracpu.dev.apiserver.client import ClusterClient
from dracpu.dev.apiserver.process import FakeProcess
from dracpu.dev.scheduler import Result
from dracpu.dev.workloads import claim_document, schedule

RESULT = Result(request="cpus", pool="node", device="cpudevnuma000", consumed=2)


def configs(document: dict[str, Any]) -> list[dict[str, Any]]:
    configs: list[dict[str, Any]] = document["status"]["allocation"]["devices"].get("config", [])
    return configs


def test_the_memory_placement_goes_into_the_claims_opaque_config() -> None:
    document = claim_document(
        "default", "c", "u", 2, [RESULT], "node", numa=None, cpuset=None, memory_placement="local"
    )
    (config,) = configs(document)
    assert config["opaque"]["parameters"] == {
        "apiVersion": "v1alpha1",
        "cpuConfig": {"memoryPlacement": "local"},
    }
    assert config["source"] == "FromClaim"


def test_with_a_cpuset_both_share_one_config_and_without_either_there_is_none() -> None:
    document = claim_document(
        "default", "c", "u", 2, [RESULT], "node", numa=None, cpuset=CPUSet.parse("2-3"),
        memory_placement="none",
    )  # fmt: skip
    (config,) = configs(document)
    assert config["opaque"]["parameters"]["cpuConfig"] == {
        "cpuset": "2-3",
        "memoryPlacement": "none",
    }
    plain = claim_document("default", "c", "u", 2, [RESULT], "node", numa=None, cpuset=None)
    assert configs(plain) == []


def test_memory_and_hugepages_are_read_as_bytes_per_capacity() -> None:
    assert memory_flags("256Mi", ["2Mi=32Mi", "1Gi=2Gi"]) == {
        "dra.cpu/memory": 256 << 20,
        "dra.cpu/hugepages2Mi": 32 << 20,
        "dra.cpu/hugepages1Gi": 2 << 30,
    }
    # Sizes are named as the kubelet names them, however they were written.
    assert memory_flags(None, ["2048Ki=4194304"]) == {"dra.cpu/hugepages2Mi": 4 << 20}
    assert memory_flags(None, []) == {}


def node_slice() -> dict[str, Any]:
    """What the dra-plugin publishes for 2 NUMA nodes with memory devices."""
    numa = "resource.kubernetes.io/numaNode"
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "node-a-dra.cpu"},
        "spec": {
            "driver": "dra.cpu",
            "nodeName": "node-a",
            "pool": {"name": "node-a", "generation": 1, "resourceSliceCount": 1},
            "devices": [
                *(
                    {
                        "name": f"cpudevnuma00{n}",
                        "attributes": {numa: {"int": n}},
                        "capacity": {"dra.cpu/cpu": {"value": "4"}},
                        "allowMultipleAllocations": True,
                    }
                    for n in (0, 1)
                ),
                *(
                    {
                        "name": f"memory-node-{n}",
                        "attributes": {numa: {"int": n}},
                        "capacity": {
                            "dra.cpu/memory": {"value": "1Gi"},
                            "dra.cpu/hugepages2Mi": {"value": f"{64 >> n}Mi"},
                        },
                        "allowMultipleAllocations": True,
                    }
                    for n in (0, 1)
                ),
            ],
        },
    }


def test_a_claim_with_memory_is_written_as_the_scheduler_allocates_it(tmp_path: Path) -> None:
    with FakeProcess(tmp_path) as apiserver:
        cluster = apiserver.client()
        cluster.create_slice(node_slice())
        scheduled_as_the_scheduler_does(cluster)


def scheduled_as_the_scheduler_does(cluster: ClusterClient) -> None:
    wants = memory_flags("256Mi", ["2Mi=32Mi"])
    document, results = schedule(
        cluster, cpus=2, numa=1, name="c1", namespace="default", cpuset=None, memory=wants
    )
    stored = cluster.read_claim("default", "c1")
    assert (stored["spec"], stored["status"]) == (document["spec"], document["status"])
    assert stored["metadata"]["uid"] == document["metadata"]["uid"]
    requests = document["spec"]["devices"]["requests"]
    assert requests[1] == {
        "name": "memory",
        "exactly": {
            "deviceClassName": "dra.cpu-memory",
            "allocationMode": "ExactCount",
            "count": 1,
            "capacity": {"requests": {"dra.cpu/hugepages2Mi": "32Mi", "dra.cpu/memory": "256Mi"}},
        },
    }
    assert requests[0]["exactly"]["capacity"] == {"requests": {"dra.cpu/cpu": "2"}}
    assert document["spec"]["devices"]["constraints"] == [
        {"requests": ["cpus", "memory"], "matchAttribute": "resource.kubernetes.io/numaNode"}
    ]
    assert document["status"]["allocation"]["devices"]["results"] == [
        {
            "request": "cpus",
            "driver": "dra.cpu",
            "pool": "node-a",
            "device": "cpudevnuma001",
            "consumedCapacity": {"dra.cpu/cpu": "2"},
        },
        {
            "request": "memory",
            "driver": "dra.cpu",
            "pool": "node-a",
            "device": "memory-node-1",
            "consumedCapacity": {"dra.cpu/hugepages2Mi": "32Mi", "dra.cpu/memory": "256Mi"},
        },
    ]
    assert [r.device for r in results] == ["cpudevnuma001", "memory-node-1"]

    # Node 1's 32Mi of 2 MiB pages are all taken now: a second claim there is refused, in one
    # line, and nothing is written; without --numa it goes to node 0.
    with pytest.raises(InsufficientMemoryError) as refused:
        schedule(cluster, cpus=1, numa=1, name="c2", namespace="default", cpuset=None,
                 memory=memory_flags(None, ["2Mi=2Mi"]))  # fmt: skip
    assert str(refused.value) == "memory-node-1 dra.cpu/hugepages2Mi: wants 2Mi, 0 free"
    assert not cluster.claim_exists("default", "c2")
    _, elsewhere = schedule(
        cluster, cpus=1, numa=None, name="c2", namespace="default", cpuset=None,
        memory=memory_flags(None, ["2Mi=2Mi"]),
    )  # fmt: skip
    assert [r.device for r in elsewhere] == ["cpudevnuma000", "memory-node-0"]
