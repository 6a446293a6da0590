"""A real Kubernetes control plane for tests, driven through tools/controlplane.sh.

    cp = ControlPlane(Path("/tmp/x"))
    cp.up("--feature-gates=DRAListTypeAttributes=true")   # etcd, apiserver, scheduler, cm
    cp.kubectl("get", "nodes")
    cp.down()

Every tier and benchmark imports it as `from harness.control_plane import ControlPlane`.
Ports come from the DRACPU_CP_*_PORT environment variables (see tools/controlplane.sh);
binaries from the cache that tools/build-kubernetes.sh fills, of the release DRACPU_KUBE_VERSION
names (harness.kubernetes_versions; default the newest), started with the feature gates
tools/kubernetes-versions names for it.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from harness.kubernetes_versions import NEWEST, selected
from harness.paths import CACHE

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "tools" / "controlplane.sh"
RELEASE = selected()
KUBE_VERSION = RELEASE.version
ETCD_VERSION = "v3.7.3"
KUBE_BIN = CACHE / f"kubernetes-{KUBE_VERSION}" / "bin"
ETCD_BIN = CACHE / f"etcd-{ETCD_VERSION}" / "bin" / "etcd"
NEWEST_BIN = CACHE / f"kubernetes-{NEWEST.version}" / "bin"
KUBECTL = Path(os.environ.get("DRACPU_CP_KUBECTL", str(NEWEST_BIN / "kubectl")))


class CommandError(ChildProcessError):
    """A kubectl or controlplane.sh call failed; carries its stderr. An OSError, so a wait
    (harness.waits) counts it as "not yet": an object not there yet, a server not answering yet."""


def missing_binaries() -> str:
    """Why the control plane cannot start here, or "" when it can. An older release is built
    without kube-controller-manager (the compat checks need none)."""
    wanted = [KUBE_BIN / "kube-apiserver", KUBE_BIN / "kube-scheduler", KUBECTL, ETCD_BIN]
    if RELEASE == NEWEST:
        wanted.append(KUBE_BIN / "kube-controller-manager")
    absent = [str(p) for p in wanted if not p.exists()]
    if absent:
        how = "make real-peers" if RELEASE == NEWEST else f"make compat VERSIONS={KUBE_VERSION}"
        return f"control plane binaries not built ({', '.join(absent)}; run {how})"
    return ""


class ControlPlane:
    """etcd + kube-apiserver + kube-scheduler + kube-controller-manager under one folder."""

    def __init__(self, root: Path, env: Mapping[str, str] | None = None) -> None:
        self.root = root
        release = {
            "KUBE_VERSION": KUBE_VERSION,
            "DRACPU_CP_BIN": str(KUBE_BIN),
            "DRACPU_CP_FEATURE_GATES": RELEASE.gates,
        }
        self.env = {**release, **os.environ, **(env or {})}
        self.flags: tuple[str, ...] = ()

    # ---- lifecycle ---------------------------------------------------------------------

    def _script(self, *args: str) -> str:
        done = subprocess.run(
            ["bash", str(SCRIPT), *args], env=self.env, capture_output=True, text=True
        )
        if done.returncode != 0:
            raise CommandError(f"controlplane.sh {args[0]}: {done.stderr.strip()}")
        return done.stdout

    def up(self, *apiserver_flags: str) -> None:
        """Start (or keep, when already running with these flags) the control plane."""
        self._script("up", str(self.root), *apiserver_flags)
        self.flags = tuple(apiserver_flags)

    def down(self) -> None:
        self._script("down", str(self.root))

    def settings(self) -> dict[str, str]:
        """controlplane.env: ports, server URL, kubeconfig path, binaries."""
        text = (self.root / "controlplane.env").read_text(encoding="utf-8")
        return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)

    @property
    def server(self) -> str:
        return self.settings()["DRACPU_CP_SERVER"]

    @property
    def kubeconfig(self) -> Path:
        """The admin (system:masters) kubeconfig."""
        return self.root / "admin.kubeconfig"

    def log(self, name: str) -> Path:
        """logs/<name>.log for etcd, apiserver, scheduler, controller-manager."""
        return self.root / "logs" / f"{name}.log"

    def client(self, name: str, common_name: str, organization: str = "") -> Path:
        """A client certificate for CN/O and a kubeconfig using it."""
        out = self._script("client", str(self.root), name, common_name, *[organization][:1])
        return Path(out.strip().splitlines()[-1])

    def token_kubeconfig(
        self, namespace: str, service_account: str, path: Path, *, bound_pod: str = ""
    ) -> Path:
        """A kubeconfig authenticating with a fresh token of the ServiceAccount. With
        `bound_pod` the token is bound to that pod of `namespace`, as the kubelet mounts it:
        the server then adds the pod's node to the token's user info."""
        bound = ("--bound-object-kind", "Pod", "--bound-object-name", bound_pod)
        token = self.kubectl(
            "create", "token", service_account, "-n", namespace, "--duration=2h",
            *(bound if bound_pod else ()),
        ).strip()  # fmt: skip
        settings = self.settings()
        path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [
                        {
                            "name": "dracpu-test",
                            "cluster": {
                                "server": settings["DRACPU_CP_SERVER"],
                                "certificate-authority": settings["DRACPU_CP_CA"],
                            },
                        }
                    ],
                    "users": [{"name": service_account, "user": {"token": token}}],
                    "contexts": [
                        {
                            "name": "dracpu-test",
                            "context": {"cluster": "dracpu-test", "user": service_account},
                        }
                    ],
                    "current-context": "dracpu-test",
                }
            ),
            encoding="utf-8",
        )
        return path

    # ---- kubectl -----------------------------------------------------------------------

    def kubectl(self, *args: str, stdin: str | None = None, kubeconfig: Path | None = None) -> str:
        done = subprocess.run(
            [str(KUBECTL), "--kubeconfig", str(kubeconfig or self.kubeconfig), *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=self.env,
            timeout=60,
        )
        if done.returncode != 0:
            raise CommandError(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def apply(self, *documents: Mapping[str, Any], kubeconfig: Path | None = None) -> str:
        text = yaml.safe_dump_all([dict(d) for d in documents])
        return self.kubectl("apply", "--server-side", "-f", "-", stdin=text, kubeconfig=kubeconfig)

    def create(self, *documents: Mapping[str, Any], kubeconfig: Path | None = None) -> str:
        text = yaml.safe_dump_all([dict(d) for d in documents])
        return self.kubectl("create", "-f", "-", stdin=text, kubeconfig=kubeconfig)

    def get(self, kind: str, name: str = "", namespace: str = "") -> dict[str, Any]:
        args = ["get", kind, *([name] if name else []), "-o", "json"]
        if namespace:
            args += ["-n", namespace]
        result: dict[str, Any] = json.loads(self.kubectl(*args))
        return result

    def items(self, kind: str, namespace: str = "", selector: str = "") -> list[dict[str, Any]]:
        args = ["get", kind, "-o", "json"]
        args += ["-n", namespace] if namespace else ["--all-namespaces"]
        if selector:
            args += ["--field-selector", selector]
        return list(json.loads(self.kubectl(*args)).get("items") or [])

    def raw(self, path: str) -> str:
        return self.kubectl("get", "--raw", path)

    def register_node(self, name: str, cpus: int = 40, declared: Sequence[str] = ()) -> str:
        """Create Node `name` with a Ready status (no kubelet heartbeats it); returns its UID."""
        self.create(node_document(name))
        status = json.dumps(node_status(cpus, declared))
        self.kubectl("patch", "node", name, "--subresource=status", "--type=merge", "-p", status)
        return str(self.get("node", name)["metadata"]["uid"])

    def events(self, namespace: str, name: str) -> list[str]:
        """Messages of the events about object `name` in `namespace`."""
        selector = f"involvedObject.name={name}"
        args = ("get", "events", "-n", namespace, "-o", "json", "--field-selector", selector)
        found = json.loads(self.kubectl(*args))
        return [str(e.get("message", "")) for e in found.get("items") or []]


def node_document(name: str, labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A Node object as a kubelet would create it (its status is patched in separately)."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
    }


def node_status(cpus: int = 40, declared: Sequence[str] = ()) -> dict[str, Any]:
    """A Ready status with capacity; `declared` goes to status.declaredFeatures."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    status: dict[str, Any] = {
        "capacity": {"cpu": str(cpus), "memory": "64Gi", "pods": "110"},
        "allocatable": {"cpu": str(cpus), "memory": "64Gi", "pods": "110"},
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "KubeletReady",
                "message": "stand-in status",
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
            }
        ],
    }
    if declared:
        status["declaredFeatures"] = list(declared)
    return {"status": status}
