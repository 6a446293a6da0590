"""The HTTP api against the services running as processes: what each endpoint answers when
everything is up, and what it answers when each service in turn is down."""

from __future__ import annotations

import re
import time

import httpx
import pytest
from harness.api_scenario import (
    CDI_MISSING,
    EXCLUSIVE,
    RESERVED,
    SHARED,
    UID_BATCH,
    UID_CACHE,
    UID_DB,
)
from harness.api_stack import SERVICES, PodServices, ServiceSet, app_client
from prometheus_client.parser import text_string_to_metric_families

from dracpu.api.models import ClaimList

PROBLEM = "application/problem+json"


async def test_node_summarises_topology_config_and_versions(client: httpx.AsyncClient) -> None:
    reply = await client.get("/v1/node")
    assert reply.status_code == 200
    body = reply.json()
    assert body["topology"] == {
        "status": "available",
        "sockets": 2,
        "numa_nodes": 2,
        "l3_caches": 2,
        "cores": 20,
        "cpus": 40,
        "smt_enabled": True,
        "online": "0-39",
        "core_types": {"standard": 40},
    }
    assert body["config"]["cpuDeviceMode"] == "grouped"
    assert body["config"]["groupBy"] == "numanode"
    assert [v["service"] for v in body["versions"]] == ["api", *SERVICES]
    assert all(v["status"] == "available" for v in body["versions"])
    assert [v["api_version"] for v in body["versions"][1:]] == [
        "dracpu.topology.v1",
        "dracpu.allocator.v1",
        "dracpu.dra_plugin.v1",
        "dracpu.nri_plugin.v1",
    ]


async def test_topology_lists_every_cpu_with_its_place(client: httpx.AsyncClient) -> None:
    body = (await client.get("/v1/topology")).json()
    assert body["summary"]["cpus"] == 40
    assert [cpu["cpu_id"] for cpu in body["cpus"]] == list(range(40))
    cpu_31 = body["cpus"][31]
    # Siblings n / n+20; socket 1 holds 10-19 and 30-39; core ids 0-4, 8-12 per socket.
    assert cpu_31 | {"pcie_roots": None} == {
        "cpu_id": 31,
        "core_id": 1,
        "physical_core_index": 11,
        "socket_id": 1,
        "cluster_id": cpu_31["cluster_id"],
        "numa_node_id": 1,
        "l3_id": cpu_31["l3_id"],
        "core_type": "standard",
        "siblings": "11,31",
        "numa_node_cpus": "10-19,30-39",
        "pcie_roots": None,
    }
    assert body["cpus"][0]["l3_id"] != cpu_31["l3_id"]


async def test_devices_show_what_claims_consume(client: httpx.AsyncClient) -> None:
    body = (await client.get("/v1/devices")).json()
    assert (body["driver"], body["mode"], body["group_by"], body["generation"]) == (
        "dra.cpu",
        "grouped",
        "numanode",
        7,
    )
    numa0, numa1 = body["devices"]
    assert numa0["name"] == "cpudevnuma000"
    assert numa0["capacity"] == {"dra.cpu/cpu": "18"}
    assert numa0["attributes"]["dra.cpu/numaNodeID"] == {"int": 0}
    assert numa0["attributes"]["dra.cpu/smtEnabled"] == {"bool": True}
    assert numa0["attributes"]["dra.cpu/coreType"] == {"string": "standard"}
    assert numa1["attributes"]["resource.kubernetes.io/pcieRoot"] == {"strings": ["pci0000:80"]}
    assert numa0["consumed"] == {"cpus": "2-3,22-23", "count": 4, "claims": [UID_DB]}
    assert numa1["consumed"] == {
        "cpus": "12-15,30,32-35",
        "count": 9,
        "claims": sorted([UID_BATCH, UID_CACHE]),
    }
    assert body["publication"]["up_to_date"] is True
    assert body["publication"]["slice_count"] == 1


async def test_claims_carry_cpus_devices_owner_and_time(client: httpx.AsyncClient) -> None:
    body = (await client.get("/v1/claims")).json()
    ClaimList.model_validate(body)  # the body is built without the model; it must still fit it
    by_uid = {claim["uid"]: claim for claim in body["claims"]}
    assert set(by_uid) == {UID_DB, UID_BATCH, UID_CACHE}
    db = by_uid[UID_DB]
    assert db == {
        "uid": UID_DB,
        "namespace": "team-a",
        "name": "db",
        "cpus": "2-3,22-23",
        "cpu_count": 4,
        "devices": [
            {"request": "cpus", "pool": "node-a", "device": "cpudevnuma000", "cpus": "2-3,22-23"}
        ],
        "owner": {
            "container_id": "ctr-postgres",
            "pod_uid": "pod-db-0",
            "pod_namespace": "team-a",
            "pod_name": "db-0",
            "container_name": "postgres",
            "running": True,
        },
        "prepared_at": "2026-05-28T20:26:40.123000Z",
        "policy": "packed",
        "cdi_device_id": f"dra.k8s.io/cpu=claim-{UID_DB}",
        "memory_nodes": "0",
        "memory": [],  # no memory device in the claim
        "shared_pool": "exclude",  # its container runs on its CPUs only
    }
    assert by_uid[UID_BATCH]["owner"] is None
    assert by_uid[UID_BATCH]["memory_nodes"] == ""  # not placed: every memory node
    assert by_uid[UID_CACHE]["owner"]["running"] is False


@pytest.mark.parametrize(
    ("namespace", "uids"),
    [
        pytest.param("team-a", {UID_DB, UID_CACHE}, id="two-claims"),
        pytest.param("team-b", {UID_BATCH}, id="one-claim"),
        pytest.param("nobody", set(), id="none"),
        pytest.param("", {UID_DB, UID_BATCH, UID_CACHE}, id="empty-means-all"),
    ],
)
async def test_claims_filter_by_namespace(
    client: httpx.AsyncClient, namespace: str, uids: set[str]
) -> None:
    reply = await client.get("/v1/claims", params={"namespace": namespace})
    assert reply.status_code == 200
    assert {claim["uid"] for claim in reply.json()["claims"]} == uids


async def test_one_claim_by_uid(client: httpx.AsyncClient) -> None:
    reply = await client.get(f"/v1/claims/{UID_BATCH}")
    assert reply.status_code == 200
    assert (reply.json()["name"], reply.json()["cpus"]) == ("batch", "12-15,32-35")


async def test_unknown_claim_is_a_404_problem(client: httpx.AsyncClient) -> None:
    reply = await client.get("/v1/claims/no-such-uid")
    assert reply.status_code == 404
    assert reply.headers["content-type"] == PROBLEM
    assert reply.json() == {
        "type": "about:blank",
        "title": "Not Found",
        "status": 404,
        "detail": "claim no-such-uid is not prepared on this node",
        "instance": "/v1/claims/no-such-uid",
    }


async def test_shared_pool_counts(client: httpx.AsyncClient) -> None:
    body = (await client.get("/v1/shared-pool")).json()
    assert body == {
        "cpus": SHARED,
        "cpu_count": 40 - 2 - 13,
        "reserved": RESERVED,
        "reserved_count": 2,
        "exclusive": EXCLUSIVE,
        "exclusive_count": 13,
        "online": "0-39",
        "online_count": 40,
        "generation": 4,
        "isolated": "",
        "on_isolated": False,
    }


async def test_containers_as_the_runtime_side_sees_them(client: httpx.AsyncClient) -> None:
    body = (await client.get("/v1/containers")).json()
    assert [(c["container_name"], c["exclusive"], c["cpus"]) for c in body["containers"]] == [
        ("postgres", True, "2-3,22-23"),
        ("nginx", False, SHARED),
    ]


async def test_health_reports_every_service_and_the_kubelet_link(
    client: httpx.AsyncClient, services: ServiceSet
) -> None:
    assert (await client.get("/healthz")).json() == {"status": "ok"}
    ready = await client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json() == {
        "ready": True,
        "services": dict.fromkeys(SERVICES, "SERVING"),
        "loops": [],
    }
    body = (await client.get("/v1/health")).json()
    assert [(s["service"], s["status"], s["socket"]) for s in body["services"]] == [
        (name, "SERVING", services.sockets[name]) for name in SERVICES
    ]
    assert all(s["last_error"] is None for s in body["services"])
    assert body["kubelet_registration"]["registered"] is True
    assert body["kubelet_registration"]["node_name"] == "node-a"
    (missing,) = body["kubelet_registration"]["missing_api_features"]
    assert missing["name"] == "listTypeAttributes"
    assert missing["feature_gate"] == "DRAListTypeAttributes"
    assert "Forbidden: list-type attributes" in missing["reason"]
    assert missing["detected_at"].startswith("2026-")
    assert body["runtime"]["connected"] is True
    assert body["runtime"]["runtime_name"] == "containerd"


async def test_health_lists_the_prerequisites_each_plugin_judged(
    client: httpx.AsyncClient,
) -> None:
    body = (await client.get("/v1/health")).json()
    assert [(p["service"], p["name"], p["ok"]) for p in body["prerequisites"]] == [
        ("dra-plugin", "resource.k8s.io/v1", True),
        ("nri-plugin", "CDI", False),
    ]
    cdi = body["prerequisites"][1]
    assert cdi["message"] == CDI_MISSING
    assert cdi["checked_at"].startswith("2026-")


async def test_metrics_concatenate_services_with_one_help_per_family(
    client: httpx.AsyncClient,
) -> None:
    await client.get("/v1/claims")  # something for the api's own counters
    reply = await client.get("/metrics")
    assert reply.status_code == 200
    assert reply.headers["content-type"].startswith("text/plain; version=0.0.4")
    text = reply.text
    help_lines = [line for line in text.splitlines() if line.startswith("# HELP ")]
    assert len(help_lines) == len(set(help_lines))
    families = {family.name: family for family in text_string_to_metric_families(text)}
    for name in (
        "dra_cpu_allocated_cpus",
        "dra_cpu_available_cpus",
        "dra_cpu_reserved_cpus",
        "dra_cpu_resource_claims_active",
        "dra_cpu_claim_allocated_cpus",
        "dra_cpu_prepare_claims",
        "dra_cpu_unprepare_claims",
        "dra_cpu_prepare_claim_duration_seconds",
        "dracpu_api_http_requests",
        "dracpu_api_backend_up",
    ):
        assert name in families, name

    def value(name: str, **labels: str) -> float:
        for sample in (s for family in families.values() for s in family.samples):
            if sample.name == name and sample.labels == labels:
                return float(sample.value)
        raise AssertionError(f"no sample {name} {labels}")

    assert value("dra_cpu_allocated_cpus") == 13
    assert value("dra_cpu_reserved_cpus") == 2
    assert value("dra_cpu_resource_claims_active") == 3
    assert all(value("dracpu_api_backend_up", service=name) == 1 for name in SERVICES)
    assert (
        value("dracpu_api_http_requests_total", route="/v1/claims", method="GET", code="200") >= 1
    )


@pytest.mark.parametrize(
    ("method", "path"),
    [
        pytest.param("POST", "/v1/claims", id="post-claims"),
        pytest.param("DELETE", "/v1/claims/x", id="delete-claim"),
        pytest.param("PUT", "/v1/node", id="put-node"),
        pytest.param("PATCH", "/v1/shared-pool", id="patch-pool"),
        pytest.param("POST", "/metrics", id="post-metrics"),
    ],
)
async def test_other_methods_are_405(client: httpx.AsyncClient, method: str, path: str) -> None:
    reply = await client.request(method, path)
    assert reply.status_code == 405
    assert reply.headers["allow"] == "GET"
    assert reply.headers["content-type"] == PROBLEM


async def test_unknown_path_is_a_404_problem(client: httpx.AsyncClient) -> None:
    reply = await client.get("/v1/cpus")
    assert reply.status_code == 404
    assert reply.headers["content-type"] == PROBLEM


async def test_index_links_the_cpu_map(client: httpx.AsyncClient) -> None:
    reply = await client.get("/")
    assert reply.status_code == 200
    assert 'href="/ui"' in reply.text


# ---- each service down in turn ---------------------------------------------------------------

# For each service: the endpoints that must fail with 503 naming it, and the composite answers
# that must stay 200 with that service's part marked unavailable (JSON path to the part).
DOWN = {
    "topology": {
        "503": ["/v1/topology"],
        "partial": [("/v1/node", ("topology",))],
        "html_503": True,
    },
    "allocator": {
        "503": ["/v1/devices", "/v1/claims", "/v1/claims/{uid}", "/v1/shared-pool"],
        "partial": [("/v1/node", ("versions", 2))],
        "html_503": False,
    },
    "dra-plugin": {
        "503": [],
        "partial": [
            ("/v1/devices", ("publication",)),
            ("/v1/health", ("kubelet_registration",)),
            ("/v1/node", ("versions", 3)),
        ],
        "html_503": False,
    },
    "nri-plugin": {
        "503": ["/v1/containers"],
        "partial": [("/v1/health", ("runtime",)), ("/v1/node", ("versions", 4))],
        "html_503": False,
    },
}


@pytest.mark.parametrize("down", list(DOWN))
async def test_a_service_down_is_explicit_and_fast(own_pod: PodServices, down: str) -> None:
    """On the real services with one claim prepared and its container running."""
    async with app_client(own_pod) as client:
        assert (await client.get("/readyz")).status_code == 200
        claims = (await client.get("/v1/claims")).json()["claims"]
        assert [c["name"] for c in claims] == ["db"]
        own_pod.stop(down)
        await _check_down(client, down, claims[0]["uid"])


async def _check_down(client: httpx.AsyncClient, down: str, uid: str) -> None:
    expected = DOWN[down]
    for path in (p.format(uid=uid) for p in expected["503"]):
        started = time.monotonic()
        reply = await client.get(path)
        assert time.monotonic() - started < 3, f"{path} took too long"
        assert reply.status_code == 503, path
        assert reply.headers["content-type"] == PROBLEM
        assert reply.json()["service"] == down
        assert f"{down} unavailable" in reply.json()["detail"]
    for path, where in expected["partial"]:
        reply = await client.get(path)
        assert reply.status_code == 200, path
        part = reply.json()
        for key in where:
            part = part[key]
        assert part["status"] == "unavailable", (path, where)
        assert part["service"] == down
        assert part["reason"]
    # Every endpoint that does not depend on it still answers in full.
    for path in ("/v1/topology", "/v1/claims", "/v1/containers", "/v1/shared-pool"):
        if path not in expected["503"]:
            assert (await client.get(path)).status_code == 200, path

    ready = await client.get("/readyz")
    assert ready.status_code == 503
    assert ready.json()["services"][down] == "UNAVAILABLE"
    health = (await client.get("/v1/health")).json()
    entry = next(s for s in health["services"] if s["service"] == down)
    assert entry["status"] == "UNAVAILABLE"
    assert entry["version"]["status"] == "unavailable"
    assert entry["last_error"]
    assert entry["last_error_at"]

    metrics = await client.get("/metrics")
    assert metrics.status_code == 200
    assert f'dracpu_api_backend_up{{service="{down}"}} 0.0' in metrics.text
    if down == "allocator":
        assert "dra_cpu_allocated_cpus " not in metrics.text

    page = await client.get("/ui")
    assert page.status_code == (503 if expected["html_503"] else 200)
    if down == "allocator":
        assert "Allocation state unknown" in page.text
        assert len(re.findall(r'data-cpu="\d+" data-role="unknown"', page.text)) == 40
