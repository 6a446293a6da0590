"""How the dra-plugin proves who it is to a real kube-apiserver, through the official client's
loaders: a kubeconfig whose user is an `exec` credential plugin (as managed clusters' kubeconfigs
are) drives a whole slice publish; and the in-cluster service account token, rewritten by the
kubelet while the old one is revoked, is picked up by the very next request."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml
from controlplane.checks import complete, slices
from harness.control_plane import CommandError, ControlPlane
from harness.driver_stack import DriverStack
from harness.waits import wait_for

from dracpu.dra_plugin.cluster.api_access import in_cluster
from dracpu.dra_plugin.cluster.apiserver import KubernetesAPI

pytestmark = [pytest.mark.controlplane, pytest.mark.timeout(600)]
NAMESPACE = "default"


def account(cp: ControlPlane, name: str) -> None:
    """A ServiceAccount allowed everything, so only authentication is under test here."""
    cp.kubectl("delete", "serviceaccount", name, "-n", NAMESPACE, "--ignore-not-found")
    cp.kubectl("create", "serviceaccount", name, "-n", NAMESPACE)
    cp.kubectl("delete", "clusterrolebinding", name, "--ignore-not-found")
    cp.kubectl("create", "clusterrolebinding", name, "--clusterrole=cluster-admin",
               f"--serviceaccount={NAMESPACE}:{name}")  # fmt: skip


def token(cp: ControlPlane, name: str, bound_secret: str = "") -> str:
    bound = ("--bound-object-kind", "Secret", "--bound-object-name", bound_secret)
    return cp.kubectl("create", "token", name, "-n", NAMESPACE, "--duration=1h",
                      *(bound if bound_secret else ())).strip()  # fmt: skip


def kubeconfig(cp: ControlPlane, path: Path, user: dict[str, object]) -> Path:
    settings = cp.settings()
    cluster = {"server": settings["DRACPU_CP_SERVER"],
               "certificate-authority": settings["DRACPU_CP_CA"]}  # fmt: skip
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "cp",
        "clusters": [{"name": "cp", "cluster": cluster}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "cp", "context": {"cluster": "cp", "user": "u"}}],
    }))  # fmt: skip
    return path


async def test_an_exec_credential_plugin_drives_a_slice_publish(
    control_plane: ControlPlane, stacks: list[DriverStack], tmp_path: Path
) -> None:
    cp = control_plane
    node = "credentials-exec"
    account(cp, "dracpu-exec")
    credential = {"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                  "status": {"token": token(cp, "dracpu-exec")}}  # fmt: skip
    runs = tmp_path / "runs"
    plugin = tmp_path / "credential-plugin"
    plugin.write_text(
        f"#!{sys.executable}\nimport json, os\n"
        f"with open({str(runs)!r}, 'a') as f:\n"
        "    f.write(json.loads(os.environ['KUBERNETES_EXEC_INFO'])['kind'] + '\\n')\n"
        f"print(json.dumps({credential!r}))\n"
    )
    plugin.chmod(plugin.stat().st_mode | stat.S_IXUSR)
    config = kubeconfig(cp, tmp_path / "exec.kubeconfig", {"exec": {
        "apiVersion": "client.authentication.k8s.io/v1", "command": str(plugin),
        "interactiveMode": "Never"}})  # fmt: skip
    # The same file, as kubectl reads it, is the ServiceAccount: the token the plugin printed.
    who = json.loads(cp.kubectl("auth", "whoami", "-o", "json", kubeconfig=config))
    assert who["status"]["userInfo"]["username"] == f"system:serviceaccount:{NAMESPACE}:dracpu-exec"

    uid = cp.register_node(node)
    stack = DriverStack(node, config, config={"cpuDeviceMode": "individual"})
    stacks.append(stack)
    runs.write_text("")
    await stack.start()
    wait_for(
        lambda: complete(slices(cp, node), 40),
        "slices published with the exec plugin's token",
        timeout=60,
        interval=0.2,
    )
    status = await stack.status()
    assert (status.last_publish_error, status.node_uid) == ("", uid)
    assert runs.read_text().splitlines()[:1] == ["ExecCredential"]  # the plugin ran it
    assert ": 401 " not in stack.plugin_log()


async def test_a_rotated_in_cluster_token_is_used_once_the_old_one_is_revoked(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    cp = control_plane
    node = "credentials-rotate"
    name = "dracpu-rotate"
    account(cp, name)
    uid = cp.register_node(node)
    for secret in ("rotate-first", "rotate-second"):
        cp.kubectl("delete", "secret", secret, "-n", NAMESPACE, "--ignore-not-found")
        cp.kubectl("create", "secret", "generic", secret, "-n", NAMESPACE)
    first, second = token(cp, name, "rotate-first"), token(cp, name, "rotate-second")

    folder = tmp_path / "serviceaccount"  # as the kubelet mounts it
    folder.mkdir()
    (folder / "ca.crt").write_text(Path(cp.settings()["DRACPU_CP_CA"]).read_text())
    (folder / "token").write_text(first)
    server = urlsplit(cp.server)
    env = {"KUBERNETES_SERVICE_HOST": str(server.hostname),
           "KUBERNETES_SERVICE_PORT": str(server.port)}  # fmt: skip
    api = KubernetesAPI(access=in_cluster(env, folder))
    try:
        assert await api.node_uid(node) == uid
        # The kubelet writes the new token; the old one's bound object goes, so the server
        # refuses it from now on (long before the client's own minute is up).
        (folder / "token").write_text(second)
        cp.kubectl("delete", "secret", "rotate-first", "-n", NAMESPACE)
        old = kubeconfig(cp, tmp_path / "old.kubeconfig", {"token": first})

        def revoked() -> bool:
            try:
                cp.kubectl("get", "--raw", "/api", kubeconfig=old)
            except CommandError as exc:
                return "Unauthorized" in str(exc) or "401" in str(exc)
            return False

        wait_for(revoked, "the first token refused", timeout=30, interval=0.2)
        assert await api.node_uid(node) == uid  # a 401, the file read again, retried
        assert api.access.configuration.api_key["BearerToken"] == f"Bearer {second}"
        assert await api.list_slices("dra.cpu", node) == []
    finally:
        await api.aclose()
