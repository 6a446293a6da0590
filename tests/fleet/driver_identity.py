"""A node's driver identity as the chart gives it: the service-account token the kubelet
mounted into that node's driver pod (the chart's `kube-api-access` projected volume, a token
bound to the pod, so the API server adds the pod's node name to the caller's
`authentication.kubernetes.io/node-name`). Read from the node's own disk, and used with kubectl
exactly as the dra-plugin uses it, nothing more."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleet.nodes import APISERVER_PORT, CLUSTER_DIR, GUEST_NODE, Fleet

TOKEN = "volumes/kubernetes.io~projected/kube-api-access/token"


def token_of(fleet: Fleet, node: str) -> str:
    """The token in `node`'s driver pod, from that node's kubelet folder."""
    pod = fleet.driver_pods()[node]
    path = Path(fleet.host.kubelet_root) / "pods" / pod["metadata"]["uid"] / TOKEN
    if node == GUEST_NODE:
        return fleet.guest.guest.sh("cat", str(path)).strip()
    return path.read_text().strip()


@dataclass(frozen=True)
class DriverIdentity:
    """kubectl as one node's driver, on the API server the nodes use."""

    node: str
    kubeconfig: Path
    kubectl_bin: str

    def kubectl(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.kubectl_bin, "--kubeconfig", str(self.kubeconfig), *args],
            input=stdin, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip


def identity_of(fleet: Fleet, node: str, folder: Path) -> DriverIdentity:
    """A kubeconfig holding only `node`'s driver token (no client certificate that would win
    over it), trusting the cluster's CA."""
    config: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "fleet",
                "cluster": {
                    "server": f"https://127.0.0.1:{APISERVER_PORT}",
                    "certificate-authority": str(CLUSTER_DIR / "controlplane/pki/ca.crt"),
                },
            }
        ],
        "users": [{"name": "driver", "user": {"token": token_of(fleet, node)}}],
        "contexts": [{"name": "driver", "context": {"cluster": "fleet", "user": "driver"}}],
        "current-context": "driver",
    }
    path = folder / f"driver-{node}.kubeconfig"
    path.write_text(json.dumps(config))
    path.chmod(0o600)
    return DriverIdentity(node, path, fleet.host.kubectl_bin)


def slice_manifest(name: str, node: str) -> str:
    """A ResourceSlice of driver dra.cpu for `node`, with no devices."""
    return json.dumps({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": "dra.cpu",
            "nodeName": node,
            "pool": {"name": f"{node}-forged", "generation": 1, "resourceSliceCount": 1},
            "devices": [],
        },
    })  # fmt: skip
