"""What the control-plane tests read from the API server: this node's slices, their devices."""

from __future__ import annotations

from typing import Any

from harness.control_plane import ControlPlane
from harness.waits import never, wait_for

DRIVER = "dra.cpu"


def slices(cp: ControlPlane, node: str) -> list[dict[str, Any]]:
    found = cp.items("resourceslices", selector=f"spec.nodeName={node},spec.driver={DRIVER}")
    return sorted(found, key=lambda s: s["metadata"]["name"])


def devices(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for s in found for d in s["spec"].get("devices") or []]


def complete(found: list[dict[str, Any]], count: int) -> bool:
    """One generation, resourceSliceCount slices, `count` devices."""
    if not found:
        return False
    generations = {s["spec"]["pool"]["generation"] for s in found}
    whole = all(s["spec"]["pool"]["resourceSliceCount"] == len(found) for s in found)
    return len(generations) == 1 and whole and len(devices(found)) == count


def published(
    cp: ControlPlane, node: str, count: int, what: str, *, timeout: float = 60.0
) -> list[dict[str, Any]]:
    """The node's slices once they are `complete` with `count` devices (waiting for them)."""
    return wait_for(
        lambda: (s := slices(cp, node)) and complete(s, count) and s,
        what,
        timeout=timeout,
        interval=0.2,
    )


def versions(found: list[dict[str, Any]]) -> dict[str, str]:
    return {s["metadata"]["name"]: s["metadata"]["resourceVersion"] for s in found}


NAMESPACE = "default"
DEVICE_CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "dra.cpu"},
    "spec": {"selectors": [{"cel": {"expression": 'device.driver == "dra.cpu"'}}]},
}


def claim(
    name: str, exactly: dict[str, Any], constraints: list[Any] | None = None
) -> dict[str, Any]:
    devices_spec: dict[str, Any] = {
        "requests": [{"name": "cpus", "exactly": {"deviceClassName": "dra.cpu", **exactly}}]
    }
    if constraints:
        devices_spec["constraints"] = constraints
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"devices": devices_spec},
    }


def pod(name: str, claim_name: str, node: str) -> dict[str, Any]:
    """A pod bound by the scheduler only (no kubelet runs it)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {
                    "name": "c",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"claims": [{"name": "cpus"}]},
                }
            ],
            "resourceClaims": [{"name": "cpus", "resourceClaimName": claim_name}],
        },
    }


def allocation(cp: ControlPlane, name: str) -> dict[str, Any] | None:
    got = cp.get("resourceclaim", name, NAMESPACE)
    result: dict[str, Any] | None = (got.get("status") or {}).get("allocation")
    return result


async def stays_unchanged(cp: ControlPlane, node: str, seconds: float = 3.0) -> None:
    """The slices' versions stay the same over several plugin poll rounds (`seconds` on the
    nominal machine, scaled to this one): nothing rewrites converged slices (neither the plugin
    nor the garbage collector)."""
    before = versions(slices(cp, node))

    def rewritten() -> str:
        after = versions(slices(cp, node))
        return f"{before} -> {after}" if after != before else ""

    await never(rewritten, "converged slices rewritten", within=seconds, interval=0.5)


def driver_pod(name: str, namespace: str, node: str, account: str) -> dict[str, Any]:
    """A pod of the driver's ServiceAccount bound to `node` (no kubelet runs it): tokens bound
    to it name that node, as the token the kubelet mounts into the driver's pod does."""
    container = {"name": "d", "image": "registry.k8s.io/pause:3.10"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "nodeName": node,
            "serviceAccountName": account,
            "tolerations": [{"operator": "Exists"}],
            "containers": [container],
        },
    }
