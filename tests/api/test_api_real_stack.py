"""The api over the real pod: `dracpu dev up` runs topology, allocator, dra-plugin, nri-plugin,
the kubelet and runtime simulators and `dracpu-api`; three claims go through the scheduler,
kubelet and runtime steps of `dracpu dev claim`. What the api shows must agree with what those
steps reported."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from harness.api_stack import SERVICES, Stack
from harness.waits import wait_for
from prometheus_client.parser import text_string_to_metric_families

from dracpu.core.cpuset import CPUSet
from dracpu.core.metrics import SPECS


@pytest.fixture(scope="module")
def http(stack: Stack) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=stack.url, timeout=10) as client:
        yield client


def test_scheduler_placed_the_claims_as_expected(stack: Stack) -> None:
    # NUMA-packed on xeon-2s-ht (siblings n / n+20): whole cores first, lowest ids first;
    # CPU 0 is kept for the shared pool.
    assert stack.claims["db"]["cpus"] == "1-2,21-22"
    assert stack.claims["db"]["device"] == "cpudevnuma000"
    assert stack.claims["batch"]["cpus"] == "10,30"
    assert stack.claims["cache"]["device"] == "cpudevnuma001"


def test_claims_agree_with_what_was_prepared(stack: Stack, http: httpx.Client) -> None:
    body = http.get("/v1/claims").json()
    shown = {
        c["name"]: (
            c["namespace"],
            c["uid"],
            c["cpus"],
            c["cpu_count"],
            [d["device"] for d in c["devices"]],
            c["owner"]["container_id"],
            c["owner"]["running"],
            c["cdi_device_id"],
        )
        for c in body["claims"]
    }
    assert shown == {
        name: (
            claim["namespace"],
            claim["uid"],
            claim["cpus"],
            len(CPUSet.parse(claim["cpus"])),
            [claim["device"]],
            claim["container"],
            True,
            f"dra.k8s.io/cpu=claim-{claim['uid']}",
        )
        for name, claim in stack.claims.items()
    }
    assert all(c["prepared_at"] for c in body["claims"])


@pytest.mark.parametrize(
    ("namespace", "names"),
    [
        pytest.param("team-a", {"db", "cache"}, id="team-a"),
        pytest.param("team-b", {"batch"}, id="team-b"),
        pytest.param("default", set(), id="none"),
    ],
)
def test_claims_filter_by_namespace(http: httpx.Client, namespace: str, names: set[str]) -> None:
    body = http.get("/v1/claims", params={"namespace": namespace}).json()
    assert {c["name"] for c in body["claims"]} == names


def test_claim_by_uid_and_unknown_uid(stack: Stack, http: httpx.Client) -> None:
    for claim in stack.claims.values():
        reply = http.get(f"/v1/claims/{claim['uid']}")
        assert reply.status_code == 200
        assert reply.json()["cpus"] == claim["cpus"]
    missing = http.get("/v1/claims/00000000-0000-0000-0000-000000000000")
    assert missing.status_code == 404
    assert missing.headers["content-type"] == "application/problem+json"


def test_containers_are_pinned_to_their_claims(stack: Stack, http: httpx.Client) -> None:
    containers = {c["container_id"]: c for c in http.get("/v1/containers").json()["containers"]}
    for claim in stack.claims.values():
        shown = containers[claim["container"]]
        assert shown["exclusive"] is True
        assert shown["cpus"] == claim["cpus"]
        assert shown["claim_uids"] == [claim["uid"]]


def test_shared_pool_is_what_the_claims_left(stack: Stack, http: httpx.Client) -> None:
    pool = http.get("/v1/shared-pool").json()
    exclusive = CPUSet()
    for claim in stack.claims.values():
        exclusive = exclusive | CPUSet.parse(claim["cpus"])
    assert pool["exclusive"] == exclusive.format()
    assert pool["exclusive_count"] == 7
    assert pool["online"] == "0-39"
    assert pool["reserved"] == ""
    assert pool["cpus"] == (CPUSet.range(0, 39) - exclusive).format()
    assert pool["cpu_count"] == 33


def test_devices_show_consumption_and_publication(stack: Stack, http: httpx.Client) -> None:
    body = http.get("/v1/devices").json()
    devices = {d["name"]: d for d in body["devices"]}
    assert set(devices) == {"cpudevnuma000", "cpudevnuma001"}
    db, batch, cache = (stack.claims[n] for n in ("db", "batch", "cache"))
    assert devices["cpudevnuma000"]["consumed"] == {
        "cpus": db["cpus"],
        "count": 4,
        "claims": [db["uid"]],
    }
    numa1 = devices["cpudevnuma001"]["consumed"]
    assert numa1["cpus"] == (CPUSet.parse(batch["cpus"]) | CPUSet.parse(cache["cpus"])).format()
    assert numa1["claims"] == sorted([batch["uid"], cache["uid"]])
    assert devices["cpudevnuma000"]["capacity"] == {"dra.cpu/cpu": "19"}  # less the floor
    assert devices["cpudevnuma000"]["attributes"]["dra.cpu/numaNodeID"] == {"int": 0}
    assert body["publication"]["status"] == "available"
    assert body["publication"]["up_to_date"] is True


def test_runtime_side_follows_the_shared_pool(http: httpx.Client) -> None:
    pool = http.get("/v1/shared-pool").json()

    def caught_up() -> dict[str, Any] | None:
        runtime: dict[str, Any] = http.get("/v1/health").json()["runtime"]
        return runtime if runtime["shared_pool_generation"] == pool["generation"] else None

    # The plugin learns of changes by watching.
    runtime = wait_for(caught_up, "the runtime side at the shared pool's generation", timeout=10)
    assert (runtime["shared_pool"], runtime["shared_pool_generation"]) == (
        pool["cpus"],
        pool["generation"],
    )


def test_health_readiness_and_versions(http: httpx.Client) -> None:
    assert http.get("/readyz").status_code == 200
    health = http.get("/v1/health").json()
    assert [(s["service"], s["status"]) for s in health["services"]] == [
        (name, "SERVING") for name in SERVICES
    ]
    assert health["kubelet_registration"]["registered"] is True
    assert health["kubelet_registration"]["claim_source"] == "kubernetes"
    assert health["runtime"]["connected"] is True
    node = http.get("/v1/node").json()
    assert [v["service"] for v in node["versions"]] == ["api", *SERVICES]
    assert all(v["status"] == "available" for v in node["versions"])
    assert node["topology"]["cpus"] == 40


def test_metrics_from_every_owner(http: httpx.Client) -> None:
    text = http.get("/metrics").text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for spec in SPECS:
        assert spec.name.removesuffix("_total") in families, spec.name
        assert text.count(f"# HELP {spec.name} ") == 1
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in families.values()
        for s in family.samples
    }
    assert samples[("dra_cpu_allocated_cpus", ())] == 7
    assert samples[("dra_cpu_resource_claims_active", ())] == 3
    assert samples[("dra_cpu_prepare_claims_total", (("result", "success"),))] == 3
    assert samples[("dra_cpu_claim_allocated_cpus_count", ())] == 3


def test_metrics_hold_every_family_once_and_each_process_by_service(http: httpx.Client) -> None:
    text = http.get("/metrics").text
    families = list(text_string_to_metric_families(text))
    names = [f.name for f in families]
    assert len(names) == len(set(names))
    declarations = [tuple(line.split(" ", 3)[1:3]) for line in text.splitlines() if line[:1] == "#"]
    assert len(declarations) == len(set(declarations))
    by_name = {f.name: f for f in families}
    for name in ("process_resident_memory_bytes", "process_open_fds", "python_gc_collections"):
        services = {s.labels["service"] for s in by_name[name].samples}
        assert services == {*SERVICES, "api"}, name
    rss = {s.labels["service"]: s.value for s in by_name["process_resident_memory_bytes"].samples}
    assert all(10_000_000 < value < 500_000_000 for value in rss.values()), rss
