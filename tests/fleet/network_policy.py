"""NetworkPolicy enforced on the guest's node (`enforced`): kube-network-policies (SIG
Network's enforcer, built by tools/tier-fleet.sh bootstrap) run in the guest with the identity
of a ServiceAccount of its own, as its DaemonSet would have (bignode/guest_netpol.py). The
host's node enforces nothing: its kernel has no nftables queue (`CONFIG_NFT_QUEUE`), which the
enforcer sends packets to."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

from fleet.nodes import CLUSTER_DIR, GUEST_NODE, Fleet
from harness.cluster import ROOT, step
from harness.guest import SERVICE_ADDRESS
from harness.speed import budget
from harness.waits import wait_for

NAME = "kube-network-policies"
NAMESPACE = "kube-system"


def enforcer_binary() -> tuple[str, str]:
    """The enforcer's binary in the tool cache and ''; or '' and why it cannot run here."""
    done = subprocess.run(
        ["bash", str(ROOT / "tools/go-tool.sh"), NAME, "--cached"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        return "", f"{done.stderr.strip()}; run tools/tier-fleet.sh bootstrap"
    if shutil.which("nft") is None:
        return "", "nft is not installed; run tools/tier-fleet.sh bootstrap"
    return done.stdout.strip(), ""


def _rbac() -> str:
    """What the enforcer reads: pods, namespaces and NetworkPolicies (and nodes), nothing it
    may write."""
    reads = ["get", "list", "watch"]
    return "\n---\n".join(
        json.dumps(obj)
        for obj in (
            {"apiVersion": "v1", "kind": "ServiceAccount",
             "metadata": {"name": NAME, "namespace": NAMESPACE}},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
             "metadata": {"name": NAME},
             "rules": [
                 {"apiGroups": [""], "resources": ["pods", "namespaces", "nodes"], "verbs": reads},
                 {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"],
                  "verbs": reads},
             ]},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
             "metadata": {"name": NAME},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                         "name": NAME},
             "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}]},
        )
    )  # fmt: skip


@contextmanager
def enforced(fleet: Fleet, binary: str, selected: str) -> Iterator[None]:
    """The enforcer running on the guest's node until the block ends, its rules in place for
    the pod at `selected` (an address some policy selects) before the block begins."""
    guest = fleet.guest.guest
    paths = subprocess.run(
        ["bash", str(ROOT / "tools/tier-bignode.sh"), "modules",
         "nf_tables", "nft_ct", "nft_queue", "nfnetlink_queue", "br_netfilter"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    fleet.host.apply(_rbac(), NAMESPACE)
    token = fleet.host.kubectl("create", "token", NAME, "-n", NAMESPACE, "--duration=6h").strip()
    ca = (CLUSTER_DIR / "controlplane" / "pki" / "ca.crt").read_text()
    try:
        with step(f"fleet: {NAME} enforcing NetworkPolicy on {GUEST_NODE}"):
            guest.call(
                "network_policy_start",
                binary=binary, modules=paths, token=token, ca=ca, node_name=GUEST_NODE,
                server=SERVICE_ADDRESS,
            )  # fmt: skip
            wait_for(
                lambda: selected in guest.call("network_policy_pods"),
                f"{NAME}'s rules queueing the packets of {selected}",
                timeout=budget(300),
                interval=2.0,
            )
        yield
    finally:
        guest.call("network_policy_stop", timeout=budget(120))
        fleet.host.kubectl("delete", "-f", "-", "--ignore-not-found", stdin=_rbac(), check=False)
