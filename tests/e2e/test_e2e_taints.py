"""Device health and device taints on the real one-node cluster (Kubernetes 1.37: DRADeviceTaints,
DRADeviceTaintRules and the kubelet's ResourceHealthStatus on by default).

- A claimed container's status shows its device's health as the kubelet reports it from the
  driver's DRAResourceHealth stream (`allocatedResourcesStatus`, KEP-4680).
- "Draining a NUMA node" (docs/user/configuration.md): a DeviceTaintRule with NoExecute on the
  device a pod's claim uses makes kube-controller-manager's device-taint eviction controller
  delete the pod; the kubelet unprepares the claim, the driver releases its CPUs, and they are
  back in the shared pool: in the driver's records (the api's claims and shared pool, the claim
  record files) and in the kernel (a shared container's Cpus_allowed_list and cgroup cpuset).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from e2e.scenarios import start_pod
from harness.cluster import (
    Cluster,
    claim_cpus,
    claim_manifest,
    cpus_request,
    pod_manifest,
    step,
)
from harness.waits import wait_for

from dracpu.core.cpuset import CPUSet

pytestmark = pytest.mark.e2e

RULE = "drain-e2e"
RULE_KEY = "example.com/maintenance"


@pytest.fixture
def clean(installed: Cluster) -> Iterator[Cluster]:
    driver = installed
    yield driver
    driver.kubectl("delete", "devicetaintrule", RULE, "--ignore-not-found")
    driver.kubectl("delete", "pods", "--all", "-n", "default", "--wait=true", "--timeout=120s")
    driver.kubectl("delete", "resourceclaims", "--all", "-n", "default", "--wait=true")


def _api(node: Cluster, path: str) -> Any:
    """The driver's api on its pod IP (the test runs on the node, beside the pod network)."""
    pod = node.driver_pod()
    assert pod is not None, "no driver pod"
    reply = httpx.get(f"http://{pod['status']['podIP']}:{node.api_port}{path}", timeout=10)
    reply.raise_for_status()
    return reply.json()


def _health_of(node: Cluster, pod: str, container: str) -> list[dict[str, Any]]:
    found = node.running(pod)
    statuses = (found or {}).get("status", {}).get("containerStatuses") or []
    for status in statuses:
        if status["name"] == container:
            return list(status.get("allocatedResourcesStatus") or [])
    return []


def test_a_claimed_containers_status_shows_its_devices_health(clean: Cluster) -> None:
    node = clean
    with step("a claimed pod, its device's health in its container status"):
        node.apply(claim_manifest("health", [cpus_request(1)]))
        start_pod(node, "health", pod_manifest("health", [("work", ["c"])], [("c", "health")]))
        reported = wait_for(lambda: _health_of(node, "health", "work"),
                            "allocatedResourcesStatus", timeout=60, interval=0.5)  # fmt: skip
    (entry,) = reported
    assert entry["name"] in ("claim:c", "claim:c/cpus"), entry
    (resource,) = entry["resources"]
    assert resource["health"] == "Healthy", resource
    uid = node.get("resourceclaim", "health")["metadata"]["uid"]
    assert uid in resource["resourceID"], resource  # the claim's CDI device


def _rule(device: str, pool: str) -> str:
    return json.dumps({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": RULE},
        "spec": {
            "deviceSelector": {"driver": "dra.cpu", "pool": pool, "device": device},
            "taint": {"key": RULE_KEY, "value": "drain", "effect": "NoExecute"},
        },
    })  # fmt: skip


def test_a_no_execute_taint_rule_evicts_the_pod_and_its_cpus_return_to_the_pool(
    clean: Cluster,
) -> None:
    node = clean
    with step("a claimed pod and a shared pod"):
        node.apply(claim_manifest("drained", [cpus_request(1)]))
        start_pod(node, "drained", pod_manifest("drained", [("work", ["c"])], [("c", "drained")]))
        start_pod(node, "shared", pod_manifest("shared", [("work", [])]))
    claimed = claim_cpus(node.env_of("drained", "work"))
    assert node.cpus_of("drained", "work") == claimed
    assert node.cpus_of("shared", "work").isdisjoint(claimed)
    claim = node.get("resourceclaim", "drained")
    uid = claim["metadata"]["uid"]
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert uid in {c["uid"] for c in _api(node, "/v1/claims")["claims"]}
    assert CPUSet.parse(_api(node, "/v1/shared-pool")["cpus"]).isdisjoint(claimed)

    with step(f"DeviceTaintRule NoExecute on {result['device']}"):
        node.apply(_rule(result["device"], result["pool"]))

        def evicted() -> bool:
            pods = node.get("pods")["items"]
            return not any(p["metadata"]["name"] == "drained" for p in pods)

        wait_for(evicted, "the pod evicted by the device-taint eviction controller",
                 timeout=120, interval=0.5)  # fmt: skip

    def eviction_event() -> bool:
        # kube-controller-manager's devicetainteviction controller, emitPodDeletionEvent
        return any(e["involvedObject"].get("name") == "drained"
                   and e.get("reason") == "DeviceTaintManagerEviction"
                   for e in node.get("events")["items"])  # fmt: skip

    wait_for(eviction_event, "the eviction's Event", timeout=30, interval=0.5)

    with step("the claim unprepared and its CPUs back in the shared pool"):
        wait_for(lambda: uid not in {c["uid"] for c in _api(node, "/v1/claims")["claims"]},
                 "the claim gone from the driver's records", timeout=90, interval=0.5)  # fmt: skip
        records = (node.state_dir / "claims").glob("*.json")
        assert not [p.name for p in records if uid in p.read_text()]
        wait_for(lambda: claimed.issubset(CPUSet.parse(_api(node, "/v1/shared-pool")["cpus"])),
                 "the CPUs in the driver's shared pool", timeout=60, interval=0.5)  # fmt: skip
        wait_for(lambda: claimed.issubset(node.cpus_of("shared", "work")),
                 "the shared container running on the CPUs again (kernel)",
                 timeout=60, interval=0.5)  # fmt: skip
        assert claimed.issubset(node.cgroup_cpuset_of("shared", "work"))
