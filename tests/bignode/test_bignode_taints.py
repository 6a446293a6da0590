"""Device taints and the shared pool on the big-node guest's cluster (8 CPUs, NUMA nodes 0-3 and
4-7: `cpudevnuma000` holds CPUs 1-3, CPU 0 being the shared floor, `cpudevnuma001` CPUs 4-7),
each read from the guest kernel (a container's Cpus_allowed_list, equal to its cgroup v2
cpuset.cpus.effective, and the kernel's list of online CPUs) and from the API server:

- a CPU of NUMA node 1 taken offline in the guest taints node 1's device `dra.cpu/offline`
  `NoSchedule` with that CPU as the value; a claim needing the device stays Pending, one that
  tolerates the taint is allocated and runs on the device's online CPUs; the CPU back online
  lifts the taint;
- an operator's DeviceTaintRule on node 1's device: `NoSchedule` sends a new claim to node 0's
  device; `NoExecute` evicts the pod using it, the driver releases its CPUs (its api's records)
  and a shared container runs on them again (the kernel);
- a container with `cpuConfig.sharedPool: include` runs on its claim's CPUs and the shared
  pool, and on its claim and the smaller pool once another claim takes CPUs from the pool;
  a sampler in the guest reads every pod process's CPUs meanwhile, and no other container is
  ever seen on the claim's CPUs.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from bignode.cluster import POD_TIMEOUT, GuestCluster
from e2e.scenarios import start_pod
from harness.cluster import claim_cpus, claim_manifest, cpus_request, pod_manifest, step
from harness.waits import wait_for

from dracpu.core.cpuset import CPUSet

# Longer than the cluster's bring-up (see test_bignode_cluster.py), in case this module is the
# first of the cluster's to run.
pytestmark = [pytest.mark.bignode, pytest.mark.timeout(2700)]
IN_CLUSTER = True  # conftest: after the bed's modules; the bed gives way to the cluster

NODE = "dracpu-bignode"  # the node's name, the driver's pool
NUMA = (CPUSet.range(0, 3), CPUSet.range(4, 7))
FLOOR = CPUSet([0])  # minSharedCPUs 1: never published, always the shared pool's
OFFLINE_CPU = 7  # of NUMA node 1
OFFLINE_TOLERATION = {"key": "dra.cpu/offline", "operator": "Exists", "effect": "NoSchedule"}
RULE = "drain-numa1"
RULE_KEY = "example.com/maintenance"
# kube-scheduler 1.37.2's whole reason on a one-node cluster whose node cannot hold the claim:
# the DRA plugin's "cannot allocate all claims" (dynamicresources.go, Filter); a taint is not
# named (the allocator skips a tainted device without a word: taintPreventsAllocation).
UNSCHEDULABLE = "0/1 nodes are available: 1 cannot allocate all claims."


def _request(count: int, numa: int | None = None, **extra: Any) -> dict[str, Any]:
    """A request of `count` CPUs; with `numa`, only a device of that NUMA node will do."""
    request = cpus_request(count)
    if numa is not None:
        expression = f'device.attributes["resource.kubernetes.io"].numaNode == {numa}'
        request["exactly"]["selectors"] = [{"cel": {"expression": expression}}]
    request["exactly"].update(extra)
    return request


def _claimed_pod(node: GuestCluster, name: str, request: dict[str, Any], **spec: Any) -> None:
    """A claim `name` and a pod `name` whose container `work` holds it (applied, not waited
    for)."""
    node.apply(claim_manifest(name, [request], **spec))
    node.apply(pod_manifest(name, [("work", ["c"])], [("c", name)]))


def _taints(node: GuestCluster) -> dict[str, list[dict[str, Any]]]:
    return {name: d.get("taints") or [] for name, d in node.published().items()}


def _allocated_device(node: GuestCluster, claim: str) -> str | None:
    allocation = (node.get("resourceclaim", claim).get("status") or {}).get("allocation")
    if not allocation:
        return None
    (result,) = allocation["devices"]["results"]
    return str(result["device"])


def _unschedulable(node: GuestCluster, pod: str) -> str:
    """The message of the pod's PodScheduled condition when the scheduler found it
    Unschedulable, else ""."""
    conditions = (node.get("pod", pod).get("status") or {}).get("conditions") or []
    for condition in conditions:
        if condition["type"] == "PodScheduled" and condition.get("reason") == "Unschedulable":
            return str(condition.get("message", ""))
    return ""


def _online(node: GuestCluster) -> CPUSet:
    return CPUSet.parse(node.guest.call("kernel")["online"])


def _uids(node: GuestCluster) -> set[str]:
    return {c["uid"] for c in node.api("/v1/claims")["claims"]}


def _pool(node: GuestCluster) -> CPUSet:
    return CPUSet.parse(node.api("/v1/shared-pool")["cpus"])


def _kernel_cpus(node: GuestCluster, pod: str, container: str) -> CPUSet:
    """The container's CPUs from a fresh read of the guest kernel (its Cpus_allowed_list,
    checked equal to its cgroup's cpuset.cpus.effective)."""
    node.refresh()
    return node.cpus_of(pod, container)


def test_an_offline_cpu_taints_its_numa_nodes_device_until_it_is_back(
    in_cluster: GuestCluster,
) -> None:
    node = in_cluster
    assert _taints(node) == {"cpudevnuma000": [], "cpudevnuma001": []}
    try:
        with step(f"CPU {OFFLINE_CPU} offline in the guest"):
            online = node.guest.call("cpu_online", cpu=OFFLINE_CPU, online=False)
            assert CPUSet.parse(online) == CPUSet.range(0, 7) - CPUSet([OFFLINE_CPU])
            found = wait_for(lambda: (t := _taints(node))["cpudevnuma001"] and t,
                             "NUMA node 1's device tainted", timeout=POD_TIMEOUT,
                             interval=1.0)  # fmt: skip
        (taint,) = found["cpudevnuma001"]
        assert (taint["key"], taint["value"], taint["effect"]) == (
            "dra.cpu/offline", str(OFFLINE_CPU), "NoSchedule"
        )  # fmt: skip
        assert found["cpudevnuma000"] == []

        with step("a claim needing the tainted device stays Pending"):
            _claimed_pod(node, "offline-plain", _request(2, numa=1))
            reason = wait_for(lambda: _unschedulable(node, "offline-plain"),
                              "the scheduler's refusal", timeout=POD_TIMEOUT,
                              interval=1.0)  # fmt: skip
        assert reason.startswith(UNSCHEDULABLE), reason
        assert _allocated_device(node, "offline-plain") is None

        with step("a claim tolerating the taint is allocated and runs"):
            tolerating = _request(2, numa=1, tolerations=[OFFLINE_TOLERATION])
            node.apply(claim_manifest("offline-tolerating", [tolerating]))
            manifest = pod_manifest("offline-tolerating", [("work", ["c"])],
                                    [("c", "offline-tolerating")])  # fmt: skip
            start_pod(node, "offline-tolerating", manifest, timeout=POD_TIMEOUT)
        assert _allocated_device(node, "offline-tolerating") == "cpudevnuma001"
        held = _kernel_cpus(node, "offline-tolerating", "work")
        assert held == claim_cpus(node.env_of("offline-tolerating", "work"))
        assert len(held) == 2 and held.issubset(NUMA[1] - CPUSet([OFFLINE_CPU])), held
        assert _allocated_device(node, "offline-plain") is None
    finally:
        back = node.guest.call("cpu_online", cpu=OFFLINE_CPU, online=True)
    assert CPUSet.parse(back) == CPUSet.range(0, 7)
    with step(f"CPU {OFFLINE_CPU} online: the taint lifted, the Pending claim allocated"):
        wait_for(lambda: _taints(node) == {"cpudevnuma000": [], "cpudevnuma001": []},
                 "the taint lifted", timeout=POD_TIMEOUT, interval=1.0)  # fmt: skip
        device = wait_for(lambda: _allocated_device(node, "offline-plain"),
                          "the Pending claim allocated", timeout=POD_TIMEOUT,
                          interval=1.0)  # fmt: skip
    assert device == "cpudevnuma001"


def _rule(effect: str) -> str:
    return json.dumps({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": RULE},
        "spec": {
            "deviceSelector": {"driver": "dra.cpu", "pool": NODE, "device": "cpudevnuma001"},
            "taint": {"key": RULE_KEY, "value": "numa1", "effect": effect},
        },
    })  # fmt: skip


def test_a_device_taint_rule_drains_one_numa_node_and_its_cpus_return_to_the_pool(
    in_cluster: GuestCluster,
) -> None:
    node = in_cluster
    served = json.loads(node.kubectl("get", "--raw", "/apis/resource.k8s.io/v1"))
    assert "devicetaintrules" in {r["name"] for r in served["resources"]}
    with step("a claimed pod on NUMA node 1's device and a shared pod"):
        _claimed_pod(node, "drained", _request(2, numa=1))
        start_pod(node, "drained", pod_manifest("drained", [("work", ["c"])], [("c", "drained")]),
                  timeout=POD_TIMEOUT)  # fmt: skip
        start_pod(node, "shared", pod_manifest("shared", [("work", [])]), timeout=POD_TIMEOUT)
    claimed = claim_cpus(node.env_of("drained", "work"))
    assert node.cpus_of("drained", "work") == claimed and claimed.issubset(NUMA[1])
    assert node.cpus_of("shared", "work") == CPUSet.range(0, 7) - claimed
    uid = node.get("resourceclaim", "drained")["metadata"]["uid"]
    assert uid in _uids(node) and _pool(node).isdisjoint(claimed)
    try:
        with step("DeviceTaintRule NoSchedule: a new claim goes to NUMA node 0's device"):
            node.apply(_rule("NoSchedule"))
            node.apply(claim_manifest("elsewhere", [_request(2)]))
            node.apply(pod_manifest("elsewhere", [("work", ["c"])], [("c", "elsewhere")]))
            device = wait_for(lambda: _allocated_device(node, "elsewhere"),
                              "the new claim allocated", timeout=POD_TIMEOUT,
                              interval=1.0)  # fmt: skip
        assert device == "cpudevnuma000"
        assert node.running("drained"), "NoSchedule evicts nothing"
        # The rule is the operator's: the driver's slices never carry it.
        assert _taints(node) == {"cpudevnuma000": [], "cpudevnuma001": []}

        with step("DeviceTaintRule NoExecute: the pod on NUMA node 1 evicted"):
            node.kubectl("delete", "devicetaintrule", RULE, "--wait=true")
            node.apply(_rule("NoExecute"))
            wait_for(lambda: not [p for p in node.get("pods")["items"]
                                  if p["metadata"]["name"] == "drained"],
                     "the pod evicted", timeout=POD_TIMEOUT, interval=1.0)  # fmt: skip
        events = node.get("events")["items"]
        assert any(e["involvedObject"].get("name") == "drained"
                   and e.get("reason") == "DeviceTaintManagerEviction" for e in events)  # fmt: skip

        with step("the claim unprepared: its CPUs back in the pool (api, kernel)"):
            wait_for(lambda: uid not in _uids(node), "the claim gone from the driver's records",
                     timeout=POD_TIMEOUT, interval=1.0)  # fmt: skip
            wait_for(lambda: claimed.issubset(_pool(node)), "the CPUs in the driver's shared pool",
                     timeout=POD_TIMEOUT, interval=1.0)  # fmt: skip
            wait_for(lambda: claimed.issubset(_kernel_cpus(node, "shared", "work")),
                     "the shared container on the CPUs again (kernel)",
                     timeout=POD_TIMEOUT, interval=1.0)  # fmt: skip
        # The shared container runs on the pool, which the other device's claim shrank.
        wait_for(lambda: _kernel_cpus(node, "shared", "work") == _pool(node),
                 "the shared container on the driver's pool", timeout=POD_TIMEOUT,
                 interval=1.0)  # fmt: skip
    finally:
        node.kubectl("delete", "devicetaintrule", RULE, "--ignore-not-found")


def test_a_mixed_container_runs_on_its_claim_and_the_pool_as_another_claim_takes_from_it(
    in_cluster: GuestCluster,
) -> None:
    node = in_cluster
    include = [{"opaque": {"driver": "dra.cpu", "parameters": {
        "apiVersion": "v1alpha1", "cpuConfig": {"sharedPool": "include"}}}}]  # fmt: skip
    with step("one pod: a claimed container, a shared one, a mixed one (sharedPool: include)"):
        node.apply(claim_manifest("plain", [_request(1, numa=0)]))
        node.apply(claim_manifest("mixed", [_request(2, numa=1)], config=include))
        manifest = pod_manifest(
            "base", [("plain", ["a"]), ("shared", []), ("pmd", ["m"])],
            [("a", "plain"), ("m", "mixed")],
        )  # fmt: skip
        start_pod(node, "base", manifest, timeout=POD_TIMEOUT)
    plain = claim_cpus(node.env_of("base", "plain"))
    env = node.env_of("base", "pmd")
    uid = node.get("resourceclaim", "mixed")["metadata"]["uid"]
    claimed = CPUSet.parse(env[f"DRA_CPUSET_{uid}"])
    assert len(claimed) == 2 and claimed.issubset(NUMA[1]) and plain.issubset(NUMA[0] - FLOOR)
    pool = _pool(node)
    assert pool == CPUSet.range(0, 7) - plain - claimed
    # The environment tells the two parts apart; the kernel runs the container on both.
    assert CPUSet.parse(env[f"DRA_SHARED_CPUSET_{uid}"]) == pool
    assert node.cpus_of("base", "pmd") == claimed | pool
    assert node.cgroup_cpuset_of("base", "pmd") == claimed | pool
    assert node.cpus_of("base", "shared") == pool
    assert node.cpus_of("base", "plain") == plain
    view = {c["container_name"]: c for c in node.api("/v1/containers")["containers"]
            if c.get("pod_name") == "base"}  # fmt: skip
    assert view["pmd"]["runs_on"] == "claimed + shared"
    assert CPUSet.parse(view["pmd"]["claimed_cpus"]) == claimed

    node.guest.call("watch_start")
    try:
        with step("another claim takes NUMA node 0's last CPUs from the pool"):
            _claimed_pod(node, "taker", _request(2, numa=0))
            start_pod(node, "taker", pod_manifest("taker", [("work", ["c"])], [("c", "taker")]),
                      timeout=POD_TIMEOUT)  # fmt: skip
            taken = claim_cpus(node.env_of("taker", "work"))
            assert taken == NUMA[0] - FLOOR - plain
            smaller = pool - taken
            wait_for(lambda: _pool(node) == smaller, "the driver's pool without them",
                     timeout=POD_TIMEOUT, interval=1.0)  # fmt: skip
            wait_for(lambda: _kernel_cpus(node, "base", "pmd") == claimed | smaller,
                     "the mixed container on its claim and the smaller pool (kernel)",
                     timeout=POD_TIMEOUT, interval=1.0)  # fmt: skip
    finally:
        watched = node.guest.call("watch_stop")
    assert node.cgroup_cpuset_of("base", "pmd") == claimed | smaller
    assert node.cpus_of("base", "shared") == smaller
    assert node.cpus_of("taker", "work") == taken
    # Every container the sampler saw, over every sample: none but the mixed one on its claim.
    seen = {key: CPUSet.parse(cpus) for key, cpus in watched["containers"].items()}
    assert "default/base/pmd" in seen and "default/taker/work" in seen, sorted(seen)
    intruders = {k: c.format() for k, c in seen.items() if k != "default/base/pmd" and c & claimed}
    assert intruders == {}, (claimed, intruders, watched["samples"])
    assert watched["samples"] >= 10, watched
