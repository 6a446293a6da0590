"""Loading how to reach the API server through the official client's loaders: each kubeconfig
field the client supports (exec credential plugins and basic authentication included), each
one refused (one ConfigError line naming it: the client's own complaints and the checks made
before it, fields it would ignore), the in-cluster configuration and its token."""

from __future__ import annotations

import base64
import os
import stat
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from harness.pki import PKI, make_pki

from dracpu.core.errors import ConfigError
from dracpu.dra_plugin.cluster.api_access import APIAccess, in_cluster, load, load_kubeconfig

SERVER = "https://127.0.0.1:6443"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> PKI:
    return make_pki(tmp_path_factory.mktemp("pki"))


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


def bearer(access: APIAccess) -> str:
    """The Authorization header the client sends now."""
    return str(access.configuration.auth_settings()["BearerToken"]["value"])


def exec_plugin(folder: Path, token: str, *, exit_code: int = 0) -> dict[str, Any]:
    """A kubeconfig `exec` user: a script printing an ExecCredential holding `token`."""
    script = folder / "credential-plugin"
    credential = {"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                  "status": {"token": token}}  # fmt: skip
    script.write_text(
        f"#!{sys.executable}\nimport json, sys\n"
        f"print(json.dumps({credential!r}))\n"
        f"sys.stderr.write('denied by the identity provider')\nsys.exit({exit_code})\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": str(script)}}


# ---- supported fields -------------------------------------------------------------------------


def test_plain_http_server_needs_no_tls_and_no_user(tmp_path: Path) -> None:
    path = write(tmp_path, {"server": "http://127.0.0.1:8080/prefix/"})
    access = load(str(path))
    c = access.configuration
    assert (c.host, c.ssl_ca_cert, c.auth_settings()) == ("http://127.0.0.1:8080/prefix", None, {})
    assert access.source == f"kubeconfig {path}"


def test_certificate_authority_file_relative_to_the_kubeconfig(tmp_path: Path, pki: PKI) -> None:
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "ca.crt").write_bytes(pki.pem("ca.crt"))
    access = load_kubeconfig(write(tmp_path, {"certificate-authority": "ca.crt"}))
    assert access.configuration.verify_ssl
    assert access.configuration.ssl_ca_cert == str(tmp_path / "config" / "ca.crt")


def test_certificate_authority_data_wins_over_the_file(tmp_path: Path, pki: PKI) -> None:
    cluster = {"certificate-authority-data": b64(pki.pem("ca.crt")),
               "certificate-authority": "absent.crt"}  # fmt: skip
    access = load_kubeconfig(write(tmp_path, cluster))
    assert Path(access.configuration.ssl_ca_cert).read_bytes() == pki.pem("ca.crt")
    access.close()


def test_insecure_skip_tls_verify(tmp_path: Path) -> None:
    access = load_kubeconfig(write(tmp_path, {"insecure-skip-tls-verify": True}))
    assert access.configuration.verify_ssl is False


def test_tls_server_name(tmp_path: Path) -> None:
    access = load_kubeconfig(write(tmp_path, {"tls-server-name": "apiserver.test"}))
    assert access.configuration.tls_server_name == "apiserver.test"


def test_no_certificate_authority_uses_the_system_roots(tmp_path: Path) -> None:
    access = load_kubeconfig(write(tmp_path, {}))
    assert access.configuration.verify_ssl and access.configuration.ssl_ca_cert is None


@pytest.mark.parametrize("form", ["files", "data", "mixed"])
def test_client_certificate_and_key(tmp_path: Path, pki: PKI, form: str) -> None:
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
    c = access.configuration
    assert c.auth_settings() == {}
    assert Path(c.cert_file).read_bytes() == pki.pem("client.crt")
    assert Path(c.key_file).read_bytes() == pki.pem("client.key")
    inline = [Path(name) for name in (c.cert_file, c.key_file) if folder not in Path(name).parents]
    for name in inline:  # urllib3 loads files: inline data is written privately
        assert stat.S_IMODE(name.stat().st_mode) == 0o600
    access.close()
    assert not any(name.exists() for name in inline)  # and does not outlive the client


def test_token(tmp_path: Path) -> None:
    assert bearer(load_kubeconfig(write(tmp_path, {}, {"token": "abc"}))) == "Bearer abc"


def test_token_file_relative_and_preferred_to_an_inline_token(tmp_path: Path) -> None:
    path = write(tmp_path, {}, {"token": "inline", "tokenFile": "token"})
    (path.parent / "token").write_text("from-file\n")
    assert bearer(load_kubeconfig(path)) == "Bearer from-file"


def test_context_without_user_is_anonymous(tmp_path: Path) -> None:
    path = write(tmp_path, {}, contexts=[{"name": "test", "context": {"cluster": "c"}}])
    assert load_kubeconfig(path).configuration.auth_settings() == {}


def test_basic_authentication(tmp_path: Path) -> None:
    access = load_kubeconfig(write(tmp_path, {}, {"username": "admin", "password": "x"}))
    assert bearer(access) == f"Basic {b64(b'admin:x')}"


def test_proxy_url(tmp_path: Path) -> None:
    access = load_kubeconfig(write(tmp_path, {"proxy-url": "http://proxy:3128"}))
    assert access.configuration.proxy == "http://proxy:3128"


def test_exec_credential_plugin(tmp_path: Path) -> None:
    access = load_kubeconfig(write(tmp_path, {}, exec_plugin(tmp_path, "from-plugin")))
    assert bearer(access) == "Bearer from-plugin"


def test_a_failing_exec_plugin_says_why(tmp_path: Path) -> None:
    path = write(tmp_path, {}, exec_plugin(tmp_path, "x", exit_code=3))
    with pytest.raises(ConfigError, match=f"^cannot load kubeconfig {path}: exec credential "
                       "plugin failed: exec: process returned 3. denied by the identity "
                       "provider$"):  # fmt: skip
        load_kubeconfig(path)


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
     "certificate authority does not load"),
    ("ca-file-absent", {"certificate-authority": "absent.crt"}, {}, {},
     "File does not exist: .*/config/absent.crt"),
    ("certificate-without-key", {}, {"client-certificate": "client.crt"}, {},
     r"user 'u': a client certificate needs its key .*\(client-key is missing\)"),
    ("key-without-certificate", {}, {"client-key-data": b64(b"k")}, {},
     r"user 'u': .* \(client-certificate is missing\)"),
    ("client-certificate-junk", {}, {"client-certificate-data": b64(b"junk"),
                                     "client-key-data": b64(b"junk")}, {},
     "client certificate and key do not load"),
    ("client-certificate-absent", {}, {"client-certificate": "absent.crt",
                                       "client-key": "absent.key"}, {},
     "File does not exist: .*/config/absent.crt"),
    ("token-not-a-string", {}, {"token": 5}, {}, "user 'u': token must be a string"),
    ("token-file-absent", {}, {"tokenFile": "absent"}, {},
     "cannot read .*/config/absent: No such file or directory"),
    ("exec-command-absent", {}, {"exec": {"command": "/absent/aws",
                                          "apiVersion": "client.authentication.k8s.io/v1"}},
     {}, "exec credential plugin failed: .*No such file or directory: '/absent/aws'"),
    ("exec-without-api-version", {}, {"exec": {"command": "aws"}}, {},
     "exec credential plugin failed: exec: malformed request. missing key 'apiVersion'"),
    ("auth-provider-unknown", {}, {"auth-provider": {"name": "azure"}}, {},
     "user 'u': auth-provider 'azure' is not supported \\(only oidc, gcp\\)"),
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
    (folder / "token").write_text("first\n")
    return folder


@pytest.mark.parametrize(
    ("host", "server"),
    [("10.96.0.1", "https://10.96.0.1:443"), ("fd00::1", "https://[fd00::1]:443")],
)
def test_in_cluster(service_account: Path, host: str, server: str) -> None:
    env = {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": "443"}
    access = in_cluster(env, service_account)
    assert access.configuration.host == server
    assert access.source == "in-cluster configuration"
    assert access.configuration.ssl_ca_cert == str(service_account / "ca.crt")
    assert bearer(access) == "Bearer first"


@pytest.mark.parametrize(
    ("env", "remove", "message"),
    [
        pytest.param({}, "", "Service host/port is not set. .*not in a pod\\? pass --kubeconfig",
                     id="not-in-a-pod"),
        pytest.param({"KUBERNETES_SERVICE_PORT": "https"}, "",
                     "KUBERNETES_SERVICE_PORT 'https' is not a port number", id="bad-port"),
        pytest.param({}, "ca.crt", "Service certification file does not exist. \\(in .*\\)",
                     id="no-ca"),
        pytest.param({}, "token", "Service token file does not exist. \\(in .*\\)",
                     id="no-token"),
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


def test_a_reload_reads_a_rotated_token_at_once(service_account: Path) -> None:
    """What the client does after a 401: the token file is read again before the minute the
    client's own refresh waits; unchanged, or unreadable, the last token stays."""
    env = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    access = in_cluster(env, service_account)
    assert access.reload() is False  # nothing changed
    (service_account / "token").write_text("second")
    assert bearer(access) == "Bearer first"  # within the minute
    assert access.reload() is True
    assert bearer(access) == "Bearer second"
    (service_account / "token").unlink()
    assert access.reload() is False
    assert bearer(access) == "Bearer second"


def test_a_reload_runs_the_exec_plugin_again(tmp_path: Path) -> None:
    path = write(tmp_path, {}, exec_plugin(tmp_path, "one"))
    access = load_kubeconfig(path)
    exec_plugin(tmp_path, "two")
    assert access.reload() is True
    assert bearer(access) == "Bearer two"
    assert os.environ.get("KUBERNETES_EXEC_INFO") is None  # the plugin's, not ours


def test_no_usable_temporary_folder_is_one_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A read-only root without a /tmp volume: the loader's private folder has nowhere to go.
    import tempfile

    from dracpu.dev.apiserver.server import kubeconfig_text

    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(kubeconfig_text("http://127.0.0.1:1"))

    def nowhere() -> str:
        raise FileNotFoundError(2, "No usable temporary directory found in ['/tmp']")

    monkeypatch.setattr(tempfile, "gettempdir", nowhere)
    with pytest.raises(ConfigError) as refused:
        load_kubeconfig(kubeconfig)
    assert str(refused.value) == (
        f"cannot load kubeconfig {kubeconfig}: [Errno 2] No usable temporary directory found "
        "in ['/tmp']"
    )
