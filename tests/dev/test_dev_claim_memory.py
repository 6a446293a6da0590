"""`dracpu dev claim --memory-placement`: the claim it writes carries the choice as the
driver reads it, the claim's opaque cpuConfig.memoryPlacement (next to --cpuset, in one
configuration)."""

from __future__ import annotations

from typing import Any

from dracpu.core.cpuset import CPUSet
from dracpu.dev.scheduler import Result
from dracpu.dev.workloads import claim_document

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
