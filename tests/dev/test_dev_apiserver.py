"""The API-server fake (`dracpu.dev.apiserver`), run as the process `dracpu dev up` runs, answers
as kube-apiserver does where the driver and the dev tools depend on it: resourceVersion
conflicts, server-side apply of a claim's status.devices per field manager, `Status` bodies
that say why, and a malformed request refused without taking the server down."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from harness.dra_plugin_node import claim, result

from dracpu.dev.apiserver.client import ClusterClient, server_of
from dracpu.dev.apiserver.process import FakeProcess

CLAIMS = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"
SLICES = "/apis/resource.k8s.io/v1/resourceslices"
APPLY = {"Content-Type": "application/apply-patch+yaml"}


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeProcess]:
    with FakeProcess(tmp_path_factory.mktemp("apiserver")) as process:
        yield process


@pytest.fixture
def http(fake: FakeProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server_of(fake.kubeconfig), timeout=10) as client:
        yield client


@pytest.fixture
def cluster(fake: FakeProcess) -> ClusterClient:
    return fake.client()


def refusal(reply: httpx.Response, code: int) -> str:
    """The message of a `Status` refusal with `code`."""
    assert reply.status_code == code, reply.text
    body = reply.json()
    assert (body["kind"], body["status"], body["code"]) == ("Status", "Failure", code)
    assert body["message"]
    return str(body["message"])


def allocated(name: str, *results: dict[str, Any]) -> dict[str, Any]:
    return claim(name, f"uid-{name}", list(results) or [result("cpudevnuma000", cpus=1)])


def apply(http: httpx.Client, name: str, manager: str, *devices: dict[str, Any]) -> httpx.Response:
    return http.patch(
        f"{CLAIMS}/{name}/status",
        params={"fieldManager": manager, "force": "true"},
        headers=APPLY,
        content=yaml.safe_dump({"status": {"devices": list(devices)}}),
    )


def test_an_update_with_a_stale_resource_version_is_a_conflict(
    http: httpx.Client, cluster: ClusterClient
) -> None:
    stored = cluster.write_claim(allocated("stale"))
    current = http.put(f"{CLAIMS}/stale", json=stored)
    assert current.status_code == 200, current.text
    newer = current.json()["metadata"]["resourceVersion"]
    assert int(newer) > int(stored["metadata"]["resourceVersion"])
    message = refusal(http.put(f"{CLAIMS}/stale", json=stored), 409)
    assert "the object has been modified" in message and '"stale"' in message
    assert cluster.read_claim("default", "stale")["metadata"]["resourceVersion"] == newer


def test_a_slice_replaced_or_deleted_against_an_old_version_is_a_conflict(
    http: httpx.Client, cluster: ClusterClient
) -> None:
    body = {"metadata": {"generateName": "s-"}, "spec": {"driver": "x.y", "nodeName": "n"}}
    first = cluster.create_slice(body)
    assert first["metadata"]["name"].startswith("s-") and len(first["metadata"]["name"]) == 7
    cluster.replace_slice(first)
    assert "has been modified" in refusal(
        http.put(f"{SLICES}/{first['metadata']['name']}", json=first), 409
    )
    stale = {"preconditions": {"resourceVersion": first["metadata"]["resourceVersion"]}}
    gone = http.request("DELETE", f"{SLICES}/{first['metadata']['name']}", json=stale)
    assert "Precondition failed: resourceVersion" in refusal(gone, 409)


def test_creating_a_claim_drops_its_status_which_only_the_status_subresource_writes(
    http: httpx.Client,
) -> None:
    made = http.post(CLAIMS, json=allocated("fresh"))
    assert made.status_code == 201, made.text
    assert made.json()["status"] == {}
    assert made.json()["metadata"]["uid"] == "uid-fresh"  # kept: see the module's docstring
    assert "already exists" in refusal(http.post(CLAIMS, json=allocated("fresh")), 409)


def test_an_apply_keeps_the_entries_other_field_managers_own(
    http: httpx.Client, cluster: ClusterClient
) -> None:
    ours, theirs = result("cpudevnuma000", cpus=1), result("nic0", driver="net.x")
    cluster.write_claim(allocated("shared", ours, theirs))
    entry = {"driver": "net.x", "pool": theirs["pool"], "device": "nic0"}
    assert apply(http, "shared", "net.x", entry).status_code == 200
    mine = {"driver": "dra.cpu", "pool": ours["pool"], "device": "cpudevnuma000"}
    assert apply(http, "shared", "dra.cpu", mine).status_code == 200
    devices = cluster.read_claim("default", "shared")["status"]["devices"]
    assert sorted(d["driver"] for d in devices) == ["dra.cpu", "net.x"]
    # An empty apply removes only the applier's own entries.
    assert apply(http, "shared", "dra.cpu").status_code == 200
    devices = cluster.read_claim("default", "shared")["status"]["devices"]
    assert [d["driver"] for d in devices] == ["net.x"]
    # Taking over another manager's entry without force is refused.
    body = yaml.safe_dump({"status": {"devices": [entry]}})
    unforced = http.patch(
        f"{CLAIMS}/shared/status", params={"fieldManager": "dra.cpu"}, headers=APPLY, content=body
    )
    assert "conflict" in refusal(unforced, 409).lower()


def test_an_entry_for_a_device_the_claim_was_not_allocated_is_invalid(
    http: httpx.Client, cluster: ClusterClient
) -> None:
    cluster.write_claim(allocated("narrow"))
    other = {"driver": "dra.cpu", "pool": "node-a", "device": "cpudevnuma001"}
    assert "must be an allocated device" in refusal(apply(http, "narrow", "dra.cpu", other), 422)


@pytest.mark.parametrize(
    ("method", "path", "words"),
    [
        ("GET", f"{CLAIMS}/absent", 'resourceclaims.resource.k8s.io "absent" not found'),
        ("DELETE", f"{CLAIMS}/absent", 'resourceclaims.resource.k8s.io "absent" not found'),
        ("GET", f"{SLICES}/absent", 'resourceslices.resource.k8s.io "absent" not found'),
        ("GET", "/api/v1/nodes/absent", 'nodes "absent" not found'),
        ("GET", "/apis/apps/v1/deployments", "could not find the requested resource"),
    ],
    ids=["claim", "claim-delete", "slice", "node", "unserved"],
)
def test_what_is_not_there_is_a_404_status_naming_it(
    http: httpx.Client, method: str, path: str, words: str
) -> None:
    assert words in refusal(http.request(method, path), 404)


@pytest.mark.parametrize(
    ("path", "body", "code", "words"),
    [
        (CLAIMS, b"{not json", 400, "json parse error"),
        (CLAIMS, b"[1, 2]", 400, "not a JSON object"),
        (CLAIMS, b'{"metadata": {}, "spec": {}}', 422, "name or generateName is required"),
        (CLAIMS, b'{"metadata": {"name": "x"}}', 422, "spec: Required value"),
        (CLAIMS, b'{"metadata": "x"}', 422, "metadata: Invalid value"),
        (SLICES, b"\xff\xfe", 400, "json parse error"),
        ("/api/v1/nodes", b'{"metadata": {}}', 422, "metadata.name: Required value"),
    ],
    ids=["not-json", "not-an-object", "no-name", "no-spec", "bad-metadata", "bytes", "node"],
)
def test_a_malformed_body_is_refused_with_a_message_and_the_fake_keeps_serving(
    http: httpx.Client, path: str, body: bytes, code: int, words: str
) -> None:
    reply = http.post(path, content=body, headers={"Content-Type": "application/json"})
    assert words in refusal(reply, code)
    assert http.get(SLICES).status_code == 200


def test_a_malformed_apply_is_refused_and_the_claim_is_unchanged(
    http: httpx.Client, cluster: ClusterClient
) -> None:
    before = cluster.write_claim(allocated("kept"))
    bad = http.patch(f"{CLAIMS}/kept/status", params={"fieldManager": "m"}, headers=APPLY,
                     content=b"status: [unclosed")  # fmt: skip
    assert "error decoding YAML" in refusal(bad, 400)
    unmanaged = http.patch(f"{CLAIMS}/kept/status", headers=APPLY, content=b"status: {}")
    assert "fieldManager: Required value" in refusal(unmanaged, 422)
    assert cluster.read_claim("default", "kept") == before


def test_lists_select_by_field_and_label(http: httpx.Client, cluster: ClusterClient) -> None:
    for name, node, tier in (("l-a", "n1", "gold"), ("l-b", "n2", "gold"), ("l-c", "n1", "tin")):
        cluster.create_slice({"metadata": {"name": name, "labels": {"tier": tier}},
                              "spec": {"driver": "sel.x", "nodeName": node}})  # fmt: skip

    def names(**params: str) -> list[str]:
        reply = http.get(SLICES, params=params)
        assert reply.status_code == 200, reply.text
        return sorted(s["metadata"]["name"] for s in reply.json()["items"])

    assert names(fieldSelector="spec.driver=sel.x,spec.nodeName=n1") == ["l-a", "l-c"]
    assert names(fieldSelector="spec.driver=sel.x", labelSelector="tier=gold") == ["l-a", "l-b"]
    assert names(fieldSelector="spec.driver=sel.x", labelSelector="tier!=gold") == ["l-c"]
    assert names(fieldSelector="spec.driver=sel.x,spec.nodeName!=n1") == ["l-b"]
    refused = refusal(http.get(SLICES, params={"labelSelector": "tier in (gold)"}), 400)
    assert "only =, == and != are served" in refused


def test_the_command_writes_a_kubeconfig_and_stops_on_sigterm(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kc"
    proc = subprocess.Popen(
        [sys.executable, "-m", "dracpu.core.cli", "dev", "apiserver", "--kubeconfig",
         str(kubeconfig), "--server-url", "http://apiserver.example:6443"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("dracpu dev apiserver: serving http://127.0.0.1:")
        assert server_of(kubeconfig) == "http://apiserver.example:6443"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
        proc.wait()


def test_an_address_it_cannot_listen_on_is_one_line(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "dracpu.dev.apiserver", "--kubeconfig", str(tmp_path / "kc"),
         "--address", "192.0.2.1:1"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert run.returncode == 2
    assert run.stderr.count("\n") == 1
    assert run.stderr.startswith("dracpu dev apiserver: error: cannot listen on 192.0.2.1:1")
    assert not (tmp_path / "kc").exists()


def test_a_long_run_remembers_only_the_newest_requests() -> None:
    from dracpu.dev.apiserver.store import REQUESTS_KEPT, Store

    store = Store()
    for n in range(REQUESTS_KEPT + 5):
        store.log_request("GET", f"/{n}", "", "")
    assert len(store.requests) == len(store.credentials) == REQUESTS_KEPT
    assert store.requests[0] == ("GET", "/5") and store.requests[-1][1] == f"/{REQUESTS_KEPT + 4}"
