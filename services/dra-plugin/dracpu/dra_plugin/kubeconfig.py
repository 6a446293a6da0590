"""Where the API server is and how to prove who we are to it: the pod's service account
(in-cluster) or a kubeconfig file.

Follows client-go for the fields a node agent meets: rest.InClusterConfig (rest/config.go), and
of a kubeconfig's current context the cluster's server, certificate-authority(-data),
insecure-skip-tls-verify and tls-server-name, the user's client-certificate(-data),
client-key(-data), token and tokenFile (clientcmd/client_config.go). Anything else that would
change how a request is authenticated (credential plugins, basic auth, impersonation, a proxy)
is refused by name rather than ignored, so no request goes out with less than the file asked
for. Every problem is one ConfigError line.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import os
import re
import ssl
import tempfile
import time
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import yaml

from dracpu.core.errors import ConfigError
from dracpu.core.log import get_logger

log = get_logger(__name__)

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
# Projected service account tokens rotate; client-go reads a token file again after a minute
# (transport/token_source.go, NewCachedFileTokenSource).
TOKEN_MAX_AGE = 60.0

# Fields with a meaning this loader does not implement: refused, never silently dropped.
UNSUPPORTED_USER = {
    "exec": "credential plugins; use a token, a tokenFile or a client certificate",
    "auth-provider": "auth-provider plugins; use a token, a tokenFile or a client certificate",
    "username": "basic authentication (username)",
    "password": "basic authentication (password)",
    "as": "impersonation (as)",
    "as-uid": "impersonation (as-uid)",
    "as-groups": "impersonation (as-groups)",
    "as-user-extra": "impersonation (as-user-extra)",
}
UNSUPPORTED_CLUSTER = {"proxy-url": "the HTTPS_PROXY environment variable is honoured instead"}


class _Invalid(Exception):
    """A problem in the configuration; the loader adds which configuration it was."""


@dataclass(frozen=True)
class ClusterAccess:
    """What a client needs to reach the API server."""

    server: str  # base URL: scheme, host, port and any path prefix
    source: str  # "kubeconfig <path>" or "in-cluster configuration", for messages
    tls: ssl.SSLContext | None = None  # None for a plain http server
    server_name: str = ""  # tls-server-name: the name the certificate is checked against
    auth: httpx.Auth | None = None


class TokenFile:
    """A bearer token kept in a file that may be replaced underneath us: read again once the
    last read is older than `max_age`. A failed re-read keeps the last token, as client-go's
    cachingTokenSource does; the first read must succeed."""

    def __init__(
        self,
        path: Path,
        *,
        max_age: float = TOKEN_MAX_AGE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        self.max_age = max_age
        self._clock = clock
        self._token = self._read()
        self._read_at = clock()

    def _read(self) -> str:
        try:
            token = self.path.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise _Invalid(f"cannot read token file {self.path}: {exc.strerror or exc}") from None
        except UnicodeDecodeError:
            raise _Invalid(f"token file {self.path} is not text") from None
        if not token:
            raise _Invalid(f"token file {self.path} is empty")
        return token

    def token(self, *, fresh: bool = False) -> str:
        """The current token; `fresh` reads the file now (after a 401)."""
        if fresh or self._clock() - self._read_at >= self.max_age:
            try:
                self._token = self._read()
            except _Invalid as exc:
                log.warning("keeping the last bearer token", reason=str(exc))
            self._read_at = self._clock()
        return self._token


class BearerAuth(httpx.Auth):
    """`Authorization: Bearer` from a fixed token or a token file. A 401 with a token from a
    file reads the file at once and retries once when it changed (the token rotated sooner
    than we looked)."""

    def __init__(self, token: str = "", file: TokenFile | None = None) -> None:
        self._token = token
        self._file = file

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        # A token file is a few hundred bytes, read at most once a minute: no thread needed.
        token = self._file.token() if self._file else self._token
        request.headers["Authorization"] = f"Bearer {token}"
        response = yield request
        if response.status_code == 401 and self._file is not None:
            fresh = self._file.token(fresh=True)
            if fresh != token:
                request.headers["Authorization"] = f"Bearer {fresh}"
                yield request


def load(kubeconfig: str = "") -> ClusterAccess:
    """The kubeconfig file when given, else the in-cluster configuration."""
    return load_kubeconfig(Path(kubeconfig)) if kubeconfig else in_cluster()


# ---- in-cluster -----------------------------------------------------------------------------


def in_cluster(
    environ: Mapping[str, str] | None = None,
    directory: Path = SERVICE_ACCOUNT_DIR,
    *,
    clock: Callable[[], float] = time.monotonic,
) -> ClusterAccess:
    """The API server's service address from the environment the kubelet gives every pod, its
    CA and our token from the mounted service account."""
    env = os.environ if environ is None else environ
    source = "in-cluster configuration"
    try:
        host = env.get("KUBERNETES_SERVICE_HOST", "")
        port = env.get("KUBERNETES_SERVICE_PORT", "")
        if not host or not port:
            raise _Invalid(
                "KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set "
                "(not in a pod? pass --kubeconfig)"
            )
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise _Invalid(f"KUBERNETES_SERVICE_PORT {port!r} is not a port number")
        if ":" in host:  # an IPv6 address (net.JoinHostPort)
            host = f"[{host}]"
        tls = _context(
            ca_file=directory / "ca.crt", ca_data=None, insecure=False, what="service account CA"
        )
        auth = BearerAuth(file=TokenFile(directory / "token", clock=clock))
    except _Invalid as exc:
        raise ConfigError(f"cannot load {source}: {exc}") from None
    return ClusterAccess(f"https://{host}:{port}", source, tls=tls, auth=auth)


# ---- kubeconfig -----------------------------------------------------------------------------


def load_kubeconfig(path: Path) -> ClusterAccess:
    """The current context of a kubeconfig file."""
    try:
        return _kubeconfig(path)
    except _Invalid as exc:
        raise ConfigError(f"cannot load kubeconfig {path}: {exc}") from None


def _kubeconfig(path: Path) -> ClusterAccess:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise _Invalid(exc.strerror or str(exc)) from None
    except UnicodeDecodeError:
        raise _Invalid("not text") from None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise _Invalid(f"not YAML{where}: {getattr(exc, 'problem', None) or exc}") from None
    if not isinstance(document, dict):
        raise _Invalid("not a kubeconfig (a mapping with clusters, users and contexts)")
    base = path.parent

    current = _string(document, "current-context", "")
    if not current:
        raise _Invalid("no current-context")
    context = _named(document, "contexts", "context", current, f"current-context {current!r}")
    cluster_name = _string(context, "cluster", f"context {current!r}")
    if not cluster_name:
        raise _Invalid(f"context {current!r} names no cluster")
    cluster = _named(document, "clusters", "cluster", cluster_name, f"cluster {cluster_name!r}")
    user_name = _string(context, "user", f"context {current!r}")
    user = _named(document, "users", "user", user_name, f"user {user_name!r}") if user_name else {}

    where = f"cluster {cluster_name!r}"
    _refuse(cluster, UNSUPPORTED_CLUSTER, where)
    server = _string(cluster, "server", where).rstrip("/")
    if not server:
        raise _Invalid(f"{where} has no server")
    parts = urlsplit(server)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _Invalid(f"{where}: server {server!r} is not an http(s) URL")
    insecure = cluster.get("insecure-skip-tls-verify", False)
    if not isinstance(insecure, bool):
        raise _Invalid(f"{where}: insecure-skip-tls-verify must be true or false")
    ca_file = _file(cluster, "certificate-authority", base, where)
    ca_data = _data(cluster, "certificate-authority-data", where)
    if insecure and (ca_file or ca_data):
        raise _Invalid(f"{where}: a certificate authority and insecure-skip-tls-verify exclude "
                       "each other")  # fmt: skip
    server_name = _string(cluster, "tls-server-name", where)

    who = f"user {user_name!r}"
    _refuse(user, UNSUPPORTED_USER, who)
    cert_file = _file(user, "client-certificate", base, who)
    cert_data = _data(user, "client-certificate-data", who)
    key_file = _file(user, "client-key", base, who)
    key_data = _data(user, "client-key-data", who)
    has_cert, has_key = bool(cert_file or cert_data), bool(key_file or key_data)
    if has_cert != has_key:
        missing = "client-key" if has_cert else "client-certificate"
        raise _Invalid(f"{who}: a client certificate needs its key and the key its certificate "
                       f"({missing} is missing)")  # fmt: skip
    token = _string(user, "token", who)
    token_file = _file(user, "tokenFile", base, who)

    auth: httpx.Auth | None = None
    if token_file:  # the file's token wins over an inline one (client-go transport.Config)
        try:
            auth = BearerAuth(file=TokenFile(token_file))
        except _Invalid as exc:
            raise _Invalid(f"{who}: {exc}") from None
    elif token:
        auth = BearerAuth(token=token)

    tls = None
    if parts.scheme == "https":
        # certificate-authority-data takes precedence over the file, as in client-go.
        tls = _context(
            ca_file=None if ca_data else ca_file,
            ca_data=ca_data,
            insecure=insecure,
            what=f"{where}: certificate authority",
        )
        if has_cert:
            _load_client_certificate(tls, cert_file, cert_data, key_file, key_data, who)
    return ClusterAccess(server, f"kubeconfig {path}", tls=tls, server_name=server_name, auth=auth)


def _named(
    document: Mapping[str, Any], section: str, field: str, name: str, what: str
) -> dict[str, Any]:
    entries = document.get(section) or []
    if not isinstance(entries, list):
        raise _Invalid(f"{section} must be a list")
    for entry in entries:
        if isinstance(entry, dict) and entry.get("name") == name:
            body = entry.get(field) or {}
            if not isinstance(body, dict):
                raise _Invalid(f"{what}: {field} must be a mapping")
            return body
    raise _Invalid(f"{what} is not among its {section}")


def _string(section: Mapping[str, Any], key: str, where: str) -> str:
    value = section.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _Invalid(f"{where + ': ' if where else ''}{key} must be a string")
    return value


def _file(section: Mapping[str, Any], key: str, base: Path, where: str) -> Path | None:
    """A file path; relative ones are relative to the kubeconfig's folder (clientcmd
    ResolvePaths)."""
    value = _string(section, key, where)
    if not value:
        return None
    path = Path(value)
    return path if path.is_absolute() else base / path


def _data(section: Mapping[str, Any], key: str, where: str) -> bytes | None:
    value = _string(section, key, where)
    if not value:
        return None
    try:
        return base64.b64decode("".join(value.split()), validate=True)
    except (binascii.Error, ValueError):
        raise _Invalid(f"{where}: {key} is not base64") from None


def _refuse(section: Mapping[str, Any], unsupported: Mapping[str, str], where: str) -> None:
    for key, meaning in unsupported.items():
        if section.get(key) not in (None, "", [], {}):
            raise _Invalid(f"{where}: {key} is not supported ({meaning})")


# ---- TLS ------------------------------------------------------------------------------------


def _context(
    *, ca_file: Path | None, ca_data: bytes | None, insecure: bool, what: str
) -> ssl.SSLContext:
    if insecure:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    try:
        if ca_data is not None:
            # PEM text or DER bytes, as the field may hold either.
            pem = ca_data.decode("ascii") if b"-----BEGIN" in ca_data else None
            return ssl.create_default_context(cadata=pem if pem is not None else ca_data)
        if ca_file is not None:
            return ssl.create_default_context(cafile=str(ca_file))
    except FileNotFoundError:
        raise _Invalid(f"{what}: {ca_file} does not exist") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:  # ssl.SSLError is an OSError
        raise _Invalid(f"{what} does not load: {_ssl_reason(exc)}") from None
    return ssl.create_default_context()  # the system's roots


def _load_client_certificate(
    context: ssl.SSLContext,
    cert_file: Path | None,
    cert_data: bytes | None,
    key_file: Path | None,
    key_data: bytes | None,
    who: str,
) -> None:
    """load_cert_chain reads files only: inline data goes to a private temporary folder that
    is removed as soon as the context holds the certificate and key."""
    with contextlib.ExitStack() as stack:
        folder: Path | None = None
        paths: list[Path] = []
        for name, data, path in (("cert.pem", cert_data, cert_file), ("key.pem", key_data,
                                                                      key_file)):  # fmt: skip
            if data is not None:  # the -data field takes precedence over the file
                if folder is None:
                    try:
                        folder = Path(stack.enter_context(tempfile.TemporaryDirectory()))
                    except OSError as exc:
                        raise _Invalid(f"{who}: no temporary folder for the client key: "
                                       f"{exc.strerror or exc}") from None  # fmt: skip
                path = folder / name
                path.touch(mode=0o600)
                path.write_bytes(data)
            assert path is not None
            paths.append(path)
        cert, key = paths
        for path in paths:
            if not path.is_file():
                raise _Invalid(f"{who}: {path} does not exist")
        try:
            context.load_cert_chain(str(cert), str(key))
        except (OSError, ValueError) as exc:
            raise _Invalid(f"{who}: client certificate and key do not load: "
                           f"{_ssl_reason(exc)}") from None  # fmt: skip


def _ssl_reason(exc: BaseException) -> str:
    """OpenSSL's words without the source location ssl appends."""
    text = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    text = " ".join(text.split())
    return re.sub(r"\s*\(_ssl\.c:\d+\)$", "", text) or type(exc).__name__
