"""`dev prepare` and `dev unprepare`: the kubelet simulator plays the kubelet's part for a
ResourceClaim of the run's API server (with `dev up --kubeconfig`, the real scheduler allocates
them there; else any claim created allocated in the run's fake):
NodePrepareResources / NodeUnprepareResources by namespace, name and the claim's current UID."""

from __future__ import annotations

from dracpu.core.errors import UnavailableError
from dracpu.dev.layout import RunLayout
from dracpu.dev.names import check_name
from dracpu.dev.sim_clients import KubeletClient
from dracpu.dev.up import run_status


def _kubeconfig(layout: RunLayout) -> str:
    status = run_status(layout)
    if status is None:
        raise UnavailableError(f"no dracpu dev up is running on {layout.root}")
    if not status:
        raise UnavailableError(f"dracpu dev up on {layout.root} is still starting")
    kubeconfig = str(status.get("kubeconfig") or "")
    if not kubeconfig:
        raise UnavailableError(f"dracpu dev up on {layout.root} recorded no kubeconfig")
    if "kubelet-sim" not in status.get("services", {}):
        raise UnavailableError("the dev up runs without the kubelet simulator (--no-kubelet-sim)")
    return kubeconfig


async def _claim_uid(kubeconfig: str, namespace: str, name: str) -> str:
    from dracpu.dra_plugin.cluster.apiserver import KubernetesAPI

    api = KubernetesAPI(kubeconfig)
    try:
        claim = await api.get_claim(namespace, name)
    finally:
        await api.aclose()
    return str((claim.get("metadata") or {}).get("uid") or "")


async def prepare(layout: RunLayout, *, name: str, namespace: str) -> str:
    check_name("namespace", namespace)
    check_name("claim name", name)
    kubeconfig = _kubeconfig(layout)
    uid = await _claim_uid(kubeconfig, namespace, name)
    ids = await KubeletClient(layout.kubelet_sim_socket).prepare(namespace, name, uid)
    return f"prepared claim={namespace}/{name} uid={uid} cdi={','.join(ids)}"


async def unprepare(layout: RunLayout, *, name: str, namespace: str) -> str:
    check_name("namespace", namespace)
    check_name("claim name", name)
    kubeconfig = _kubeconfig(layout)
    uid = await _claim_uid(kubeconfig, namespace, name)
    await KubeletClient(layout.kubelet_sim_socket).unprepare(namespace, name, uid)
    return f"unprepared claim={namespace}/{name} uid={uid}"
