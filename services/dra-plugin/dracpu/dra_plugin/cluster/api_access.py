"""Where the API server is and how to prove who we are to it, as the official Kubernetes
client loads it: the pod's service account (in-cluster) or a kubeconfig file.

The client does the work: kubernetes.config's in-cluster loader (the token file read again
once a minute, as the kubelet rotates it) and its kubeconfig loader (certificate authority,
client certificates, tokens and token files, tls-server-name, insecure-skip-tls-verify,
proxy-url, basic authentication, exec credential plugins, the oidc and gcp auth-providers).
What remains here: every problem is one ConfigError line naming the configuration; a
kubeconfig field the client would silently ignore (impersonation, an auth-provider it does
not know) is refused by name, so no request goes out with less than the file asked for; an
exec plugin that fails says why instead of sending anonymous requests; inline key material is
written to a private folder that is removed on close; and `reload()` reads the credentials
again (a 401 means they rotated sooner than the client looked).
"""

from __future__ import annotations

import base64
import binascii
import copy
import logging
import os
import re
import secrets
import shutil
import ssl
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml
from kubernetes.client import Configuration
from kubernetes.config import kube_config
from kubernetes.config.config_exception import ConfigException
from kubernetes.config.incluster_config import InClusterConfigLoader
from kubernetes.config.kube_config import KubeConfigLoader

from dracpu.core.errors import ConfigError

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
IN_CLUSTER = "in-cluster configuration"

# User fields the client's kubeconfig loader does not implement: refused, never dropped.
IGNORED_USER = {
    "as": "impersonation (as)",
    "as-uid": "impersonation (as-uid)",
    "as-groups": "impersonation (as-groups)",
    "as-user-extra": "impersonation (as-user-extra)",
}
KNOWN_AUTH_PROVIDERS = ("oidc", "gcp")


@dataclass
class APIAccess:
    """What a client needs to reach the API server; `configuration` is the client's own."""

    source: str  # "kubeconfig <path>" or "in-cluster configuration", for messages
    configuration: Configuration
    _load: Callable[[Configuration], None]  # the client's loader, into a configuration
    _private: Path | None = None  # inline certificates and keys, as files for urllib3
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def reload(self) -> bool:
        """Read the credentials again now (token file, exec plugin); True when they changed.
        A failed read keeps the last ones. Called from worker threads."""
        with self._lock:
            before = _credentials(self.configuration)
            fresh = Configuration()
            try:
                with _exec_errors() as errors:
                    self._load(fresh)
                if self._private is not None:
                    _private_files(self._private)
                _bearer(fresh)
            except (ConfigException, OSError, ValueError, KeyError):
                return False
            if errors or _credentials(fresh) == before:
                return False
            self.configuration = fresh
            return True

    def close(self) -> None:
        if self._private is not None:
            shutil.rmtree(self._private, ignore_errors=True)


def _private_files(folder: Path) -> None:
    """The client's loader remembers the files it wrote for inline data by their content, for
    every later load in the process: forget ours, so no other load uses a file in our folder
    (removed when we close)."""
    for content, name in list(kube_config._temp_files.items()):
        if Path(name).parent == folder:
            del kube_config._temp_files[content]


def _bearer(configuration: Configuration) -> None:
    """The token as client-go sends it: "Bearer <token>" without the surrounding whitespace a
    token file may hold (the client's in-cluster loader writes "bearer <file content>"), also
    after each refresh by the client's hook."""

    def canonical(c: Configuration) -> None:
        value = str(c.api_key.get("BearerToken") or "")
        scheme, _, token = value.strip().partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            c.api_key["BearerToken"] = f"Bearer {token.strip()}"

    hook = configuration.refresh_api_key_hook
    if hook is not None:

        def refresh(c: Configuration) -> None:
            hook(c)
            _bearer(c)  # the client's hook installs a fresh hook of its own: wrap that one

        configuration.refresh_api_key_hook = refresh
    canonical(configuration)


def _credentials(c: Configuration) -> tuple[str, str, str]:
    """The bearer token, client certificate and key file a configuration holds."""
    return (str(c.api_key.get("BearerToken") or ""), str(c.cert_file or ""),
            str(c.key_file or ""))  # fmt: skip


def load(kubeconfig: str = "") -> APIAccess:
    """The kubeconfig file when given, else the in-cluster configuration."""
    return load_kubeconfig(Path(kubeconfig)) if kubeconfig else in_cluster()


def in_cluster(
    environ: Mapping[str, str] | None = None, directory: Path = SERVICE_ACCOUNT_DIR
) -> APIAccess:
    """The API server's service address from the environment the kubelet gives every pod, its
    CA and our token from the mounted service account; the token is read again once a minute."""
    env = os.environ if environ is None else environ
    loader = InClusterConfigLoader(
        token_filename=str(directory / "token"),
        cert_filename=str(directory / "ca.crt"),
        environ=env,
    )
    configuration = Configuration()
    try:
        port = env.get("KUBERNETES_SERVICE_PORT", "")
        if port and (not port.isdigit() or not 0 < int(port) < 65536):
            raise ConfigException(f"KUBERNETES_SERVICE_PORT {port!r} is not a port number")
        try:
            loader.load_and_set(configuration)
        except ConfigException as exc:
            if "host/port" in str(exc):
                raise ConfigException(f"{exc} (KUBERNETES_SERVICE_HOST and "
                                      "KUBERNETES_SERVICE_PORT; not in a pod? pass "
                                      "--kubeconfig)") from None  # fmt: skip
            raise ConfigException(f"{exc} (in {directory})") from None
        _bearer(configuration)
        _tls_loads(configuration)
    except (ConfigException, OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot load {IN_CLUSTER}: {_one_line(exc)}") from None
    return APIAccess(IN_CLUSTER, configuration, loader.load_and_set)


def load_kubeconfig(path: Path) -> APIAccess:
    """The current context of a kubeconfig file."""
    source = f"kubeconfig {path}"
    private: Path | None = None
    try:
        # Made by the client's loader only when the file has inline certificates or keys; the
        # temporary folder must be writable all the same (none is: "No usable temporary
        # directory", one line).
        private = Path(tempfile.gettempdir()) / f"dracpu-kube-{os.getpid()}-{secrets.token_hex(8)}"
        document = _checked(_read(path))
        loader = KubeConfigLoader(
            config_dict=document,
            config_base_path=str(path.absolute().parent),
            temp_file_path=str(private),
        )
        configuration = Configuration()
        with _exec_errors() as errors:
            loader.load_and_set(configuration)
        _private_files(private)
        _bearer(configuration)
        if errors and not any(_credentials(configuration)):
            raise ConfigException(f"exec credential plugin failed: {errors[-1]}")
        _tls_loads(configuration)
    except (ConfigException, OSError, UnicodeDecodeError, ValueError, KeyError) as exc:
        if private is not None:
            shutil.rmtree(private, ignore_errors=True)
        raise ConfigError(f"cannot load {source}: {_one_line(exc)}") from None
    return APIAccess(source, configuration, loader.load_and_set, private)


def _read(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigException(exc.strerror or str(exc)) from None
    except UnicodeDecodeError:
        raise ConfigException("not text") from None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigException(f"not YAML{where}: {getattr(exc, 'problem', None) or exc}") from None
    if not isinstance(document, dict):
        raise ConfigException("not a kubeconfig (a mapping with clusters, users and contexts)")
    return document


def _checked(document: Mapping[str, Any]) -> dict[str, Any]:
    """The document to hand to the client's loader, after the checks it does not make (names
    that resolve, an http(s) server, a real boolean for insecure-skip-tls-verify, a certificate
    with its key) and the refusal of user fields it would ignore. A token file wins over an
    inline token, as in client-go (the client's loader prefers the inline one)."""
    current = _string(document, "current-context", "")
    if not current:
        raise ConfigException("no current-context")
    context = _named(document, "contexts", "context", current, f"current-context {current!r}")
    cluster_name = _string(context, "cluster", f"context {current!r}")
    if not cluster_name:
        raise ConfigException(f"context {current!r} names no cluster")
    cluster = _named(document, "clusters", "cluster", cluster_name, f"cluster {cluster_name!r}")
    user_name = _string(context, "user", f"context {current!r}")
    user = _named(document, "users", "user", user_name, f"user {user_name!r}") if user_name else {}

    where = f"cluster {cluster_name!r}"
    server = _string(cluster, "server", where)
    if not server:
        raise ConfigException(f"{where} has no server")
    parts = urlsplit(server)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigException(f"{where}: server {server!r} is not an http(s) URL")
    insecure = cluster.get("insecure-skip-tls-verify", False)
    if not isinstance(insecure, bool):
        raise ConfigException(f"{where}: insecure-skip-tls-verify must be true or false")
    if insecure and (cluster.get("certificate-authority") or
                     cluster.get("certificate-authority-data")):  # fmt: skip
        raise ConfigException(f"{where}: a certificate authority and insecure-skip-tls-verify "
                              "exclude each other")  # fmt: skip

    _base64(cluster, "certificate-authority-data", where)
    who = f"user {user_name!r}"
    for key in ("client-certificate-data", "client-key-data"):
        _base64(user, key, who)
    for key in ("token", "tokenFile", "client-certificate", "client-certificate-data",
                "client-key", "client-key-data"):  # fmt: skip
        _string(user, key, who)
    has_cert = bool(user.get("client-certificate") or user.get("client-certificate-data"))
    has_key = bool(user.get("client-key") or user.get("client-key-data"))
    if has_cert != has_key:
        missing = "client-key" if has_cert else "client-certificate"
        raise ConfigException(f"{who}: a client certificate needs its key and the key its "
                              f"certificate ({missing} is missing)")  # fmt: skip
    for key, meaning in IGNORED_USER.items():
        if user.get(key) not in (None, "", [], {}):
            raise ConfigException(f"{who}: {key} is not supported ({meaning})")
    provider = user.get("auth-provider")
    if isinstance(provider, dict) and provider.get("name") not in KNOWN_AUTH_PROVIDERS:
        raise ConfigException(f"{who}: auth-provider {provider.get('name')!r} is not "
                              f"supported (only {', '.join(KNOWN_AUTH_PROVIDERS)})")  # fmt: skip
    if user.get("tokenFile") and user.get("token"):
        document = copy.deepcopy(dict(document))
        for entry in document["users"]:
            if isinstance(entry, dict) and entry.get("name") == user_name:
                entry["user"].pop("token")
    return dict(document)


def _named(
    document: Mapping[str, Any], section: str, field: str, name: str, what: str
) -> dict[str, Any]:
    entries = document.get(section) or []
    if not isinstance(entries, list):
        raise ConfigException(f"{section} must be a list")
    for entry in entries:
        if isinstance(entry, dict) and entry.get("name") == name:
            body = entry.get(field) or {}
            if not isinstance(body, dict):
                raise ConfigException(f"{what}: {field} must be a mapping")
            return body
    raise ConfigException(f"{what} is not among its {section}")


def _base64(section: Mapping[str, Any], key: str, where: str) -> None:
    value = _string(section, key, where)
    try:
        base64.b64decode("".join(value.split()), validate=True)
    except (binascii.Error, ValueError):
        raise ConfigException(f"{where}: {key} is not base64") from None


def _tls_loads(configuration: Configuration) -> None:
    """The certificate authority and client certificate load as urllib3 will load them on
    each new connection: a broken one is a ConfigError now, not a failure per request."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        if configuration.ssl_ca_cert:
            what = "certificate authority does"
            context.load_verify_locations(cafile=configuration.ssl_ca_cert)
        if configuration.cert_file:
            what = "client certificate and key do"
            context.load_cert_chain(configuration.cert_file, configuration.key_file)
    except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
        text = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        text = re.sub(r"\s*\(_ssl\.c:\d+\)$", "", " ".join(text.split()))
        raise ConfigException(f"{what} not load: {text or type(exc).__name__}") from None


def _string(section: Mapping[str, Any], key: str, where: str) -> str:
    value = section.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ConfigException(f"{where + ': ' if where else ''}{key} must be a string")
    return value


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.module == "kube_config":
            self.messages.append(record.getMessage())


@contextmanager
def _exec_errors() -> Iterator[list[str]]:
    """What the client's kubeconfig loader logs (and otherwise swallows) about an exec plugin
    or a missing key, for our own error."""
    handler = _Collect()
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield handler.messages
    finally:
        root.removeHandler(handler)


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.filename and exc.strerror:
        return f"cannot read {exc.filename}: {exc.strerror}"
    return " ".join(str(exc).split()) or type(exc).__name__
