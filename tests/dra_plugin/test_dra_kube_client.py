"""The API client against the loopback API server: each status mapped to its error with the
server's message, TLS as a kubeconfig or the pod's service account describes it, bearer tokens
(rotated ones too), and watches: 410 Gone, and closing one early closes its stream."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from harness.dra_plugin_node import NODE
from harness.pki import PKI, make_pki
from harness.waits import eventually
from kubernetes.config import incluster_config

from dracpu.core.errors import (
    ConflictError,
    DracpuError,
    InvalidInputError,
    NotFoundError,
    UnavailableError,
)
from dracpu.dev.apiserver import Store, fake_apiserver
from dracpu.dra_plugin.cluster.api_access import in_cluster
from dracpu.dra_plugin.cluster.apiserver import KubernetesAPI
from dracpu.dra_plugin.cluster.objects import WatchExpiredError

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> PKI:
    return make_pki(tmp_path_factory.mktemp("pki"))


def body(name: str = "cpudev0") -> dict[str, Any]:
    spec = {"driver": "dra.cpu", "nodeName": NODE, "devices": [{"name": name}],
            "pool": {"name": NODE, "generation": 1, "resourceSliceCount": 1}}  # fmt: skip
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"generateName": "s-"}, "spec": spec}  # fmt: skip


def server_of(kubeconfig: Path) -> str:
    return str(yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"])


def rewrite(kubeconfig: Path, cluster: dict[str, Any], user: dict[str, Any]) -> Path:
    document = yaml.safe_load(kubeconfig.read_text())
    document["clusters"][0]["cluster"].update(cluster)
    document["users"][0]["user"].update(user)
    kubeconfig.write_text(yaml.safe_dump(document))
    return kubeconfig


@pytest.mark.parametrize(
    ("code", "reason", "error"),
    [
        (400, "Bad Request", InvalidInputError),
        (403, "Forbidden", UnavailableError),
        (404, "Not Found", NotFoundError),
        (409, "Conflict", ConflictError),
        (412, "Precondition Failed", ConflictError),
        (422, "Unprocessable Entity", InvalidInputError),
        (429, "Too Many Requests", UnavailableError),
        (500, "Internal Server Error", UnavailableError),
    ],
)
async def test_each_status_is_its_error_with_the_servers_message(
    tmp_path: Path, code: int, reason: str, error: type[DracpuError]
) -> None:
    with fake_apiserver(tmp_path) as (store, kubeconfig):
        api = KubernetesAPI(str(kubeconfig))
        store.refuse["cpudev"] = (code, "Reason", f"the server's words for {code}")
        with pytest.raises(error) as caught:
            await api.create_slice(body())
        assert type(caught.value) is error
        assert str(caught.value) == (
            f"create resourceslice: {code} {reason}: the server's words for {code}"
        )
        await api.aclose()


async def test_a_refused_connection_is_unavailable(tmp_path: Path) -> None:
    with fake_apiserver(tmp_path) as (_, kubeconfig):
        pass
    api = KubernetesAPI(str(kubeconfig))
    with pytest.raises(UnavailableError, match=r"^get node node-a: .*[Cc]onnect"):
        await api.node_uid(NODE)
    with pytest.raises(UnavailableError, match=r"^watch resourceslices: "):
        async for _ in api.watch_slices("dra.cpu", NODE, "1", 5):
            pass
    await api.aclose()


# ---- TLS and credentials ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("served", "cluster", "user", "client"),
    [
        pytest.param("server-ip", {"certificate-authority": "ca.crt"}, {"token": "t0"}, "",
                     id="ca-file-and-token"),
        pytest.param("server-ip", {"certificate-authority-data": "ca"}, {"tokenFile": "token"},
                     "", id="ca-data-and-token-file"),
        pytest.param("server-named", {"insecure-skip-tls-verify": True}, {}, "",
                     id="insecure"),
        pytest.param("server-named", {"certificate-authority": "ca.crt",
                                      "tls-server-name": "apiserver.test"}, {}, "",
                     id="tls-server-name"),
        pytest.param("server-ip", {"certificate-authority": "ca.crt"},
                     {"client-certificate": "client.crt", "client-key": "client.key"},
                     "system:node:node-a", id="client-certificate-files"),
        pytest.param("server-ip", {"certificate-authority": "ca.crt"},
                     {"client-certificate-data": "client.crt", "client-key-data": "client.key"},
                     "system:node:node-a", id="client-certificate-data"),
    ],
)  # fmt: skip
async def test_tls_and_credentials_from_a_kubeconfig(
    tmp_path: Path,
    pki: PKI,
    served: str,
    cluster: dict[str, Any],
    user: dict[str, Any],
    client: str,
) -> None:
    for name in ("ca.crt", "client.crt", "client.key"):
        (tmp_path / name).write_bytes(pki.pem(name))
    (tmp_path / "token").write_text("from-file")
    inline = {"ca": "ca.crt", "client.crt": "client.crt", "client.key": "client.key"}

    def value(key: str, given: Any) -> Any:
        if key.endswith("-data"):
            return base64.b64encode(pki.pem(inline[given])).decode()
        return given

    with fake_apiserver(tmp_path, pki.server_context(served)) as (store, kubeconfig):
        rewrite(kubeconfig, {k: value(k, v) for k, v in cluster.items()},
                {k: value(k, v) for k, v in user.items()})  # fmt: skip
        api = KubernetesAPI(str(kubeconfig))
        assert await api.node_uid(NODE) is None
        await api.aclose()
        token = user.get("token") or ("from-file" if "tokenFile" in user else "")
        assert store.credentials == [(f"Bearer {token}" if token else "", client)]


async def test_a_certificate_for_another_name_is_refused(tmp_path: Path, pki: PKI) -> None:
    (tmp_path / "ca.crt").write_bytes(pki.pem("ca.crt"))
    with fake_apiserver(tmp_path, pki.server_context("server-named")) as (store, kubeconfig):
        api = KubernetesAPI(str(rewrite(kubeconfig, {"certificate-authority": "ca.crt"}, {})))
        with pytest.raises(UnavailableError, match=r"^get node node-a: .*certificate verify"):
            await api.node_uid(NODE)
        await api.aclose()
        assert store.requests == []


def frozen_clock(monkeypatch: pytest.MonkeyPatch, now: list[float]) -> None:
    """The client's in-cluster loader tells the minute by datetime.datetime.now(): `now[0]`
    seconds after a fixed instant instead."""
    start = datetime.datetime(2026, 1, 1)

    class Clock(datetime.datetime):
        @classmethod
        def now(cls, tz: datetime.tzinfo | None = None) -> Clock:
            moment = start + datetime.timedelta(seconds=now[0])
            return cls.fromtimestamp(moment.timestamp(), tz)

    monkeypatch.setattr(incluster_config, "datetime",
                        SimpleNamespace(datetime=Clock, timedelta=datetime.timedelta))  # fmt: skip


async def test_in_cluster_with_a_rotating_token(
    tmp_path: Path, pki: PKI, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "serviceaccount"
    folder.mkdir()
    (folder / "ca.crt").write_bytes(pki.pem("ca.crt"))
    (folder / "token").write_text("first")
    now = [0.0]
    frozen_clock(monkeypatch, now)
    with fake_apiserver(tmp_path, pki.server_context("server-ip")) as (store, kubeconfig):
        port = server_of(kubeconfig).rsplit(":", 1)[1]
        env = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": port}
        api = KubernetesAPI(access=in_cluster(env, folder))
        await api.node_uid(NODE)
        (folder / "token").write_text("second")
        await api.node_uid(NODE)  # within the minute: the token read at start
        now[0] = 61.0
        await api.node_uid(NODE)
        # Rotated and already refused before the minute is up: a 401 reads it at once.
        (folder / "token").write_text("third")
        store.require_token = "Bearer third"
        await api.node_uid(NODE)
        await api.aclose()
    assert [auth for auth, _ in store.credentials] == [
        "Bearer first",
        "Bearer first",
        "Bearer second",
        "Bearer second",
        "Bearer third",
    ]


# ---- watches ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("as_status", "said"),
    [(False, r"410 Expired: too old"), (True, r"410 Gone: too old")],
    ids=["error-event", "http-status"],
)
async def test_a_watch_from_a_compacted_version_is_expired(
    tmp_path: Path, as_status: bool, said: str
) -> None:
    """The server says 410 either as an ERROR event in the stream or as the answer's own
    status: both are WatchExpiredError (list again), carrying the server's message."""
    with fake_apiserver(tmp_path) as (store, kubeconfig):
        store.gone_as_status = as_status
        api = KubernetesAPI(str(kubeconfig))
        await api.create_slice(body())
        _, version = await api.list_slices_at("dra.cpu", NODE)
        store.compact()
        with pytest.raises(WatchExpiredError, match=rf"^watch resourceslices: {said}"):
            async for _ in api.watch_slices("dra.cpu", NODE, version, 5):
                pass
        await api.aclose()


async def test_a_watch_streams_events_and_ends_with_the_server(tmp_path: Path) -> None:
    with fake_apiserver(tmp_path) as (store, kubeconfig):
        api = KubernetesAPI(str(kubeconfig))
        _, version = await api.list_slices_at("dra.cpu", NODE)
        created = await api.create_slice(body())
        other = dict(body(), spec=dict(body()["spec"], nodeName="node-b"))
        await api.create_slice(other)  # not this node's: filtered by the server
        events = [e async for e in api.watch_slices("dra.cpu", NODE, version, 1)]
        assert [(e.type, e.object["metadata"]["name"]) for e in events] == [
            ("ADDED", created["metadata"]["name"])
        ]
        watch = next(path for method, path in store.requests if "watch=true" in path)
        assert "allowWatchBookmarks=true" in watch and "timeoutSeconds=1" in watch
        assert f"resourceVersion={version}" in watch
        await api.aclose()


async def open_watches(store: Store) -> int:
    with store.lock:
        return store.open_watches


@pytest.mark.parametrize("how", ["aclose", "aclosing-break", "cancel"])
async def test_leaving_a_watch_early_closes_its_stream(tmp_path: Path, how: str) -> None:
    with fake_apiserver(tmp_path) as (store, kubeconfig):
        api = KubernetesAPI(str(kubeconfig))
        _, version = await api.list_slices_at("dra.cpu", NODE)
        await api.create_slice(body())
        watch = api.watch_slices("dra.cpu", NODE, version, 300)
        if how == "aclose":
            assert (await anext(watch)).type == "ADDED"
            await watch.aclose()
        elif how == "aclosing-break":
            async with contextlib.aclosing(watch) as events:
                async for _ in events:
                    break
        else:

            async def read() -> None:
                async for _ in watch:
                    pass

            task = asyncio.create_task(read())
            await eventually(lambda: open_watches(store), "the watch open")
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

        async def closed() -> bool:
            return await open_watches(store) == 0

        # The server sees the connection end long before the watch's 300 s.
        await eventually(closed, "the server to see the watch closed", timeout=10)
        await api.aclose()


async def test_watch_read_timeout_exceeds_the_servers_own(tmp_path: Path) -> None:
    # A watch quiet for its whole timeoutSeconds is not a read timeout: the server ends it.
    with fake_apiserver(tmp_path) as (_, kubeconfig):
        api = KubernetesAPI(str(kubeconfig))
        _, version = await api.list_slices_at("dra.cpu", NODE)
        assert [e async for e in api.watch_slices("dra.cpu", NODE, version, 1.5)] == []
        await api.aclose()


# ---- round trips ------------------------------------------------------------------------------


async def test_fields_newer_than_the_clients_models_survive_a_round_trip(tmp_path: Path) -> None:
    """Objects travel as the server's JSON, never through the client's generated models: a
    field no release of the client knows, anywhere in a slice or a claim, is kept, with its
    nulls, on the way in and on the way out."""
    future = {"fromAFutureRelease": {"nested": [1, None, {"k": "v"}]}, "nullable": None}
    with fake_apiserver(tmp_path) as (store, kubeconfig):
        api = KubernetesAPI(str(kubeconfig))
        sent = body()
        sent["spec"] |= future
        sent["spec"]["devices"][0] |= future
        created = await api.create_slice(sent)
        name = created["metadata"]["name"]
        assert store.slices[name]["spec"]["devices"][0]["fromAFutureRelease"] == \
            future["fromAFutureRelease"]  # fmt: skip
        (listed,) = await api.list_slices("dra.cpu", NODE)
        for got in (created, listed):
            assert got["spec"]["devices"][0] | {"name": "cpudev0"} == sent["spec"]["devices"][0]
            assert {k: got["spec"][k] for k in future} == future
        updated = await api.update_slice(listed)
        assert {k: updated["spec"][k] for k in future} == future

        claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                 "metadata": {"name": "c", "namespace": "ns", "uid": "u"},
                 "spec": future, "status": {"allocation": future, **future}}  # fmt: skip
        store.claims[("ns", "c")] = claim
        assert await api.get_claim("ns", "c") == claim
        await api.aclose()


async def test_an_exec_plugin_is_run_again_after_a_401(tmp_path: Path) -> None:
    """The credential an exec plugin printed is refused (revoked, rotated early): the plugin
    runs again and the request is retried once with what it prints now."""
    current = tmp_path / "current-token"
    current.write_text("one")
    plugin = tmp_path / "credential-plugin"
    plugin.write_text(
        f"#!{sys.executable}\nimport json\n"
        f"token = open({str(current)!r}).read()\n"
        "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1', "
        "'kind': 'ExecCredential', 'status': {'token': token}}))\n"
    )
    plugin.chmod(0o755)
    with fake_apiserver(tmp_path) as (store, kubeconfig):
        exec_user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1",
                              "command": str(plugin)}}  # fmt: skip
        api = KubernetesAPI(str(rewrite(kubeconfig, {}, exec_user)))
        await api.node_uid(NODE)
        current.write_text("two")
        store.require_token = "Bearer two"
        await api.node_uid(NODE)
        store.require_token = "Bearer three"  # the plugin still prints two: the 401 stands
        with pytest.raises(UnavailableError, match=r"^get node node-a: 401 Unauthorized"):
            await api.node_uid(NODE)
        await api.aclose()
    assert [auth for auth, _ in store.credentials] == [
        "Bearer one", "Bearer one", "Bearer two", "Bearer two"
    ]  # fmt: skip
