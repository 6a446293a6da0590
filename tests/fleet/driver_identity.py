"""A node's driver identity as the chart gives it: the service-account token the kubelet
mounted into that node's driver pod (the chart's `kube-api-access` projected volume, a token
bound to the pod, so the API server adds the pod's node name to the caller's
`authentication.kubernetes.io/node-name`). Read from the node's own disk, and used with kubectl
exactly as the dra-plugin uses it, nothing more."""

from __future__ import annotations

import json
import ssl
import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleet.nodes import APISERVER_PORT, CLUSTER_DIR, GUEST_NODE, Fleet

TOKEN = "volumes/kubernetes.io~projected/kube-api-access/token"
# The API server's words for the chart's policy on slices (templates/admissionpolicy.yaml).
SLICE_REFUSED = (
    "ValidatingAdmissionPolicy 'dra-driver-cpu-resourceslices' with binding "
    "'dra-driver-cpu-resourceslices' denied request: the dra.cpu driver may only write "
    "ResourceSlices of the node it runs on"
)


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
    token: str

    def kubectl(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.kubectl_bin, "--kubeconfig", str(self.kubeconfig), *args],
            input=stdin, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip

    def apply_claim_devices(self, claim: str, devices: list[dict[str, Any]]) -> tuple[int, str]:
        """A server-side apply of `devices` as the claim's status.devices (field manager
        dra.cpu), a dry run: the request the dra-plugin sends, as it sends it (kubectl patch
        would first GET the status, which the driver's role does not grant). The HTTP status
        and the API server's message."""
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": claim, "namespace": "default"},
            "status": {"devices": devices},
        }
        request = urllib.request.Request(
            f"https://127.0.0.1:{APISERVER_PORT}/apis/resource.k8s.io/v1/namespaces/default/"
            f"resourceclaims/{claim}/status?fieldManager=dra.cpu&dryRun=All",
            data=json.dumps(body).encode(),
            method="PATCH",
            headers={
                "Authorization": f"Bearer {self.token}",
                "Content-Type": "application/apply-patch+yaml",
            },
        )
        context = ssl.create_default_context(cafile=str(CLUSTER_DIR / "controlplane/pki/ca.crt"))
        try:
            with urllib.request.urlopen(request, timeout=60, context=context) as reply:
                return int(reply.status), ""
        except urllib.error.HTTPError as refused:
            return refused.code, str(json.loads(refused.read()).get("message", ""))


def identity_of(fleet: Fleet, node: str, folder: Path) -> DriverIdentity:
    """A kubeconfig holding only `node`'s driver token (no client certificate that would win
    over it), trusting the cluster's CA."""
    token = token_of(fleet, node)
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
        "users": [{"name": "driver", "user": {"token": token}}],
        "contexts": [{"name": "driver", "context": {"cluster": "fleet", "user": "driver"}}],
        "current-context": "driver",
    }
    path = folder / f"driver-{node}.kubeconfig"
    path.write_text(json.dumps(config))
    path.chmod(0o600)
    return DriverIdentity(node, path, fleet.host.kubectl_bin, token)


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
