"""From a ResourceClaim to the allocator request: the checks and the filtering (pure)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from harness.dra_plugin_node import claim, result

from dracpu.core.errors import ConflictError, DracpuError, InvalidInputError
from dracpu.dra_plugin.common.claim_request import (
    allocated_cpus,
    base_request,
    prepare_request,
)
from dracpu.dra_plugin.common.resource_claim import ClaimRef, parse_claim
from dracpu.dra_plugin.paths import KubeletPaths

REF = ClaimRef("ns", "c", "u1")
OPAQUE = {
    "source": "FromClaim",
    "requests": ["cpus"],
    "opaque": {"driver": "dra.cpu", "parameters": {"apiVersion": "v1alpha1", "cpuConfig": {}}},
}
FOREIGN_CONFIG = {"source": "FromClass", "opaque": {"driver": "gpu.example.com", "parameters": {}}}


def request_of(obj: Any) -> Any:
    """The allocator request for `obj` as the prepare path builds it: parsed, then checked."""
    return prepare_request(REF, parse_claim(obj, "dra.cpu", f"claim {REF}"))


ERRORS: dict[str, tuple[Any, type[DracpuError], str]] = {
    "replaced": (claim("c", "u2", [result("d0", cpus=1)], namespace="ns"), ConflictError,
                 "claim ns/c got replaced"),
    "not-allocated": (claim("c", "u1", None, namespace="ns"), ConflictError,
                      "claim ns/c not allocated"),
    "admin-access": (claim("c", "u1", [result("d0", cpus=1, adminAccess=True)], namespace="ns"),
                     InvalidInputError, "asks for adminAccess"),
    "results-not-a-list": ({"metadata": {"uid": "u1"},
                            "status": {"allocation": {"devices": {"results": {"a": 1}}}}},
                           InvalidInputError, "results: expected a list"),
    "result-not-an-object": ({"metadata": {"uid": "u1"},
                              "status": {"allocation": {"devices": {"results": ["x"]}}}},
                             InvalidInputError, "results[0]: expected an object"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(ERRORS))
def test_refused_claims(case: str) -> None:
    obj, error, text = ERRORS[case]
    with pytest.raises(error, match=re.escape(text)):
        request_of(obj)


def test_other_drivers_results_and_configs_are_dropped() -> None:
    obj = claim(
        "c",
        "u1",
        [result("gpu0", driver="gpu.example.com"), result("cpudevnuma001", cpus=4)],
        namespace="ns",
        config=[FOREIGN_CONFIG, OPAQUE],
    )
    request = request_of(obj)
    assert request is not None
    assert (request.claim_uid, request.namespace, request.name) == ("u1", "ns", "c")
    (only,) = request.results
    assert (only.request, only.driver, only.pool, only.device) == (
        "cpus",
        "dra.cpu",
        "node-a",
        "cpudevnuma001",
    )
    assert dict(only.consumed_capacity) == {"dra.cpu/cpu": "4"}
    (config,) = request.configs
    assert (config.source, list(config.requests), config.driver) == (
        "FromClaim",
        ["cpus"],
        "dra.cpu",
    )
    assert json.loads(config.parameters) == OPAQUE["opaque"]["parameters"]  # type: ignore[index]


def test_nothing_for_this_driver_is_none() -> None:
    obj = claim("c", "u1", [result("gpu0", driver="gpu.example.com")], namespace="ns")
    assert request_of(obj) is None


def test_allocated_cpus_sums_per_request_and_device() -> None:
    obj = claim(
        "c",
        "u1",
        [result("d0", cpus=2), result("d0", cpus=3), result("d1", request="b"), result("d2")],
        namespace="ns",
    )
    request = request_of(obj)
    assert request is not None
    assert allocated_cpus(request) == {("cpus", "d0"): 5}


def test_names_and_annotations() -> None:
    assert base_request("req/sub") == "req"
    assert base_request("req") == "req"
    annotated = claim("c", "u1", None, annotations={"resource.kubernetes.io/pod-claim-name": "cpu"})
    assert parse_claim(annotated, "dra.cpu").pod_claim_name == "cpu"
    assert parse_claim(claim("c", "u1", None), "dra.cpu").pod_claim_name is None


@pytest.mark.parametrize(
    ("root", "ok"),
    [("/var/lib/kubelet", True), ("/" + "r" * 64, True), ("/" + "r" * 65, False)],
    ids=["default", "at-budget", "one-over"],
)
def test_kubelet_root_budget(root: str, ok: bool) -> None:
    from pathlib import Path

    from dracpu.core.errors import ConfigError

    paths = KubeletPaths(Path(root))
    if ok:
        paths.check()
        assert len(str(paths.registration_socket)) <= 107
    else:
        with pytest.raises(ConfigError, match="may use at most 65 bytes and uses 66"):
            paths.check()
