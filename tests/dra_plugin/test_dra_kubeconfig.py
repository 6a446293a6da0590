"""Loading how to reach the API server: each kubeconfig field the loader supports, each one it
refuses (one ConfigError line naming it), the in-cluster configuration and token rotation."""

from __future__ import annotations

import base64
import ssl
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from pki import PKI, make_pki

from dracpu.core.errors import ConfigError
from dracpu.dra_plugin.kubeconfig import (
    BearerAuth,
    ClusterAccess,
    TokenFile,
    in_cluster,
    load,
    load_kubeconfig,
)

SERVER = "https://127.0.0.1:6443"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> PKI:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """tempfile's folder for this test only: whatever the loader leaves there is visible."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    yield folder


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def write(folder: Path, cluster: dict[str, Any], user: dict[str, Any] | None = None,
          **document: Any) -> Path:  # fmt: skip
    """A kubeconfig with one cluster, one user and a current context using both."""
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "test",
        "clusters": [{"name": "c", "cluster": {"server": SERVER, **cluster}}],
        "users": [{"name": "u", "user": user or {}}],
        "contexts": [{"name": "test", "context": {"cluster": "c", "user": "u"}}],
    }
    body.update(document)
    path = folder / "config" / "kubeconfig"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(body))
    return path


def bearer(access: ClusterAccess) -> str:
    assert isinstance(access.auth, BearerAuth)
    flow = access.auth.auth_flow(httpx.Request("GET", SERVER))
    return str(next(flow).headers["Authorization"])


# ---- supported fields -------------------------------------------------------------------------


def test_plain_http_server_needs_no_tls_and_no_user(tmp_path: Path) -> None:
    path = write(tmp_path, {"server": "http://127.0.0.1:8080/prefix/"})
    access = load(str(path))
    assert (access.server, access.tls, access.auth) == ("http://127.0.0.1:8080/prefix", None, None)
    assert access.source == f"kubeconfig {path}"


def test_certificate_authority_file_relative_to_the_kubeconfig(tmp_path: Path, pki: PKI) -> None:
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "ca.crt").write_bytes(pki.pem("ca.crt"))
    access = load_kubeconfig(write(tmp_path, {"certificate-authority": "ca.crt"}))
    assert access.tls is not None and access.tls.verify_mode == ssl.CERT_REQUIRED
    assert access.tls.check_hostname
    (ca,) = access.tls.get_ca_certs()
    assert ca["subject"] == ((("commonName", "dracpu-test-ca"),),)


def test_certificate_authority_data_wins_over_the_file(tmp_path: Path, pki: PKI) -> None:
    cluster = {"certificate-authority-data": b64(pki.pem("ca.crt")),
               "certificate-authority": "absent.crt"}  # fmt: skip
    access = load_kubeconfig(write(tmp_path, cluster))
    assert access.tls is not None and len(access.tls.get_ca_certs()) == 1


def test_insecure_skip_tls_verify(tmp_path: Path) -> None:
    access = load_kubeconfig(write(tmp_path, {"insecure-skip-tls-verify": True}))
    assert access.tls is not None
    assert (access.tls.verify_mode, access.tls.check_hostname) == (ssl.CERT_NONE, False)


def test_tls_server_name(tmp_path: Path) -> None:
    access = load_kubeconfig(write(tmp_path, {"tls-server-name": "apiserver.test"}))
    assert access.server_name == "apiserver.test"


def test_no_certificate_authority_uses_the_system_roots(tmp_path: Path) -> None:
    access = load_kubeconfig(write(tmp_path, {}))
    assert access.tls is not None and access.tls.verify_mode == ssl.CERT_REQUIRED


@pytest.mark.parametrize("form", ["files", "data", "mixed"])
def test_client_certificate_and_key(tmp_path: Path, pki: PKI, private_tmp: Path, form: str) -> None:
    folder = tmp_path / "config"
    folder.mkdir()
    for name in ("client.crt", "client.key"):
        (folder / name).write_bytes(pki.pem(name))
    user = {
        "files": {"client-certificate": "client.crt", "client-key": str(folder / "client.key")},
        "data": {"client-certificate-data": b64(pki.pem("client.crt")),
                 "client-key-data": b64(pki.pem("client.key"))},
        "mixed": {"client-certificate": "client.crt",
                  "client-key-data": b64(pki.pem("client.key"))},
    }[form]  # fmt: skip
    access = load_kubeconfig(write(tmp_path, {}, user))
    assert access.tls is not None and access.auth is None
    assert list(private_tmp.iterdir()) == []  # inline key material does not outlive the load


def test_token(tmp_path: Path) -> None:
    assert bearer(load_kubeconfig(write(tmp_path, {}, {"token": "abc"}))) == "Bearer abc"


def test_token_file_relative_and_preferred_to_an_inline_token(tmp_path: Path) -> None:
    path = write(tmp_path, {}, {"token": "inline", "tokenFile": "token"})
    (path.parent / "token").write_text("from-file\n")
    assert bearer(load_kubeconfig(path)) == "Bearer from-file"


def test_context_without_user_is_anonymous(tmp_path: Path) -> None:
    path = write(tmp_path, {}, contexts=[{"name": "test", "context": {"cluster": "c"}}])
    assert load_kubeconfig(path).auth is None


# ---- refusals ---------------------------------------------------------------------------------

REFUSED: list[tuple[str, dict[str, Any], dict[str, Any], dict[str, Any], str]] = [
    # id, cluster fields, user fields, document fields, expected message (regex)
    ("no-current-context", {}, {}, {"current-context": ""}, "no current-context"),
    ("unknown-current-context", {}, {}, {"current-context": "prod"},
     "current-context 'prod' is not among its contexts"),
    ("contexts-not-a-list", {}, {}, {"contexts": {"test": {}}}, "contexts must be a list"),
    ("unknown-cluster", {}, {}, {"clusters": []}, "cluster 'c' is not among its clusters"),
    ("unknown-user", {}, {}, {"users": [{"name": "other", "user": {}}]},
     "user 'u' is not among its users"),
    ("no-server", {"server": ""}, {}, {}, "cluster 'c' has no server"),
    ("server-not-a-url", {"server": "127.0.0.1:6443"}, {}, {},
     "cluster 'c': server '127.0.0.1:6443' is not an http\\(s\\) URL"),
    ("server-not-a-string", {"server": 6443}, {}, {}, "cluster 'c': server must be a string"),
    ("insecure-not-a-bool", {"insecure-skip-tls-verify": "yes"}, {}, {},
     "cluster 'c': insecure-skip-tls-verify must be true or false"),
    ("insecure-with-ca", {"insecure-skip-tls-verify": True, "certificate-authority": "ca.crt"},
     {}, {}, "cluster 'c': a certificate authority and insecure-skip-tls-verify exclude"),
    ("ca-data-not-base64", {"certificate-authority-data": "not base64!"}, {}, {},
     "cluster 'c': certificate-authority-data is not base64"),
    ("ca-data-not-a-certificate", {"certificate-authority-data": b64(b"junk")}, {}, {},
     "cluster 'c': certificate authority does not load"),
    ("ca-file-absent", {"certificate-authority": "absent.crt"}, {}, {},
     "cluster 'c': certificate authority: .*/config/absent.crt does not exist"),
    ("proxy-url", {"proxy-url": "http://proxy:3128"}, {}, {},
     "cluster 'c': proxy-url is not supported"),
    ("certificate-without-key", {}, {"client-certificate": "client.crt"}, {},
     r"user 'u': a client certificate needs its key .*\(client-key is missing\)"),
    ("key-without-certificate", {}, {"client-key-data": b64(b"k")}, {},
     r"user 'u': .* \(client-certificate is missing\)"),
    ("client-certificate-junk", {}, {"client-certificate-data": b64(b"junk"),
                                     "client-key-data": b64(b"junk")}, {},
     "user 'u': client certificate and key do not load"),
    ("client-certificate-absent", {}, {"client-certificate": "absent.crt",
                                       "client-key": "absent.key"}, {},
     "user 'u': .*/config/absent.crt does not exist"),
    ("token-not-a-string", {}, {"token": 5}, {}, "user 'u': token must be a string"),
    ("token-file-absent", {}, {"tokenFile": "absent"}, {},
     "user 'u': cannot read token file .*/config/absent: No such file"),
    ("exec", {}, {"exec": {"command": "aws", "apiVersion": "client.authentication.k8s.io/v1"}},
     {}, "user 'u': exec is not supported \\(credential plugins"),
    ("auth-provider", {}, {"auth-provider": {"name": "oidc"}}, {},
     "user 'u': auth-provider is not supported"),
    ("basic-auth", {}, {"username": "admin", "password": "x"}, {},
     "user 'u': username is not supported"),
    ("impersonation", {}, {"as": "system:admin"}, {}, "user 'u': as is not supported"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("cluster", "user", "document", "message"),
    [pytest.param(*case[1:], id=case[0]) for case in REFUSED],
)
def test_refused(
    tmp_path: Path,
    cluster: dict[str, Any],
    user: dict[str, Any],
    document: dict[str, Any],
    message: str,
) -> None:
    path = write(tmp_path, cluster, user, **document)
    with pytest.raises(ConfigError, match=f"^cannot load kubeconfig {path}: {message}") as caught:
        load_kubeconfig(path)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param(None, "No such file or directory", id="absent"),
        pytest.param("clusters: [\n", "not YAML at line 2", id="not-yaml"),
        pytest.param("- a\n- b\n", "not a kubeconfig", id="a-list"),
        pytest.param("", "not a kubeconfig", id="empty"),
    ],
)
def test_unreadable_file(tmp_path: Path, content: str | None, message: str) -> None:
    path = tmp_path / "kubeconfig"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError, match=f"^cannot load kubeconfig {path}: {message}"):
        load(str(path))


# ---- in-cluster -------------------------------------------------------------------------------


@pytest.fixture
def service_account(tmp_path: Path, pki: PKI) -> Path:
    folder = tmp_path / "serviceaccount"
    folder.mkdir()
    (folder / "ca.crt").write_bytes(pki.pem("ca.crt"))
    (folder / "token").write_text("first")
    return folder


@pytest.mark.parametrize(
    ("host", "server"),
    [("10.96.0.1", "https://10.96.0.1:443"), ("fd00::1", "https://[fd00::1]:443")],
)
def test_in_cluster(service_account: Path, host: str, server: str) -> None:
    env = {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": "443"}
    access = in_cluster(env, service_account)
    assert access.server == server
    assert access.source == "in-cluster configuration"
    assert access.tls is not None and len(access.tls.get_ca_certs()) == 1
    assert bearer(access) == "Bearer first"


@pytest.mark.parametrize(
    ("env", "remove", "message"),
    [
        pytest.param({}, "", "KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set",
                     id="not-in-a-pod"),
        pytest.param({"KUBERNETES_SERVICE_PORT": "https"}, "",
                     "KUBERNETES_SERVICE_PORT 'https' is not a port number", id="bad-port"),
        pytest.param({}, "ca.crt", "service account CA: .*/ca.crt does not exist", id="no-ca"),
        pytest.param({}, "token", "cannot read token file .*token: No such file", id="no-token"),
    ],
)  # fmt: skip
def test_in_cluster_refused(
    service_account: Path, env: dict[str, str], remove: str, message: str
) -> None:
    environ = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    environ = env if not env and not remove else environ | env
    if remove:
        (service_account / remove).unlink()
    with pytest.raises(ConfigError, match=f"^cannot load in-cluster configuration: {message}"):
        in_cluster(environ, service_account)


def test_token_file_is_read_again_once_a_minute(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("first")
    now = [0.0]
    tokens = TokenFile(path, clock=lambda: now[0])
    path.write_text("second")
    now[0] = 59.0
    assert tokens.token() == "first"
    now[0] = 60.0
    assert tokens.token() == "second"
    path.unlink()  # a failed re-read keeps the last token
    now[0] = 200.0
    assert tokens.token() == "second"
    path.write_text("third")
    assert tokens.token(fresh=True) == "third"


def test_a_401_reads_a_rotated_token_at_once_and_retries(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("old")
    auth = BearerAuth(file=TokenFile(path))
    flow = auth.auth_flow(httpx.Request("GET", SERVER))
    assert next(flow).headers["Authorization"] == "Bearer old"
    path.write_text("new")
    retried = flow.send(httpx.Response(401))
    assert retried.headers["Authorization"] == "Bearer new"
    with pytest.raises(StopIteration):
        flow.send(httpx.Response(200))
    # Unchanged token: the 401 stands.
    flow = auth.auth_flow(httpx.Request("GET", SERVER))
    next(flow)
    with pytest.raises(StopIteration):
        flow.send(httpx.Response(401))
