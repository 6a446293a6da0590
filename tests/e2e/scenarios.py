"""Scenarios of the chart on a real cluster that size themselves from what the node publishes,
so the one-node cluster of this machine (tests/e2e, 2 CPUs) and the cluster whose node is the
big-node guest (tests/bignode, 8 CPUs on 2 NUMA nodes) run the same code. Every pinning check
reads the container's process on its node (`Cluster.cpus_of` and friends)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from harness.cluster import (
    SLEEP,
    TEST_IMAGE,
    Cluster,
    claim_cpus,
    claim_manifest,
    cpus_request,
    pod_manifest,
    say,
    step,
)
from harness.waits import wait_for

from dracpu.core.cpuset import CPUSet


def capacities(node: Cluster) -> list[int]:
    """The CPUs of each published device, largest first."""
    found = (int(d["capacity"]["dra.cpu/cpu"]["value"]) for d in node.published().values())
    return sorted(found, reverse=True)


def grouped_capacity(node: Cluster) -> int:
    return sum(capacities(node))


def start_pod(node: Cluster, name: str, manifest: str, timeout: float = 90) -> None:
    """Apply and wait for Running. A failed NodePrepareResources fails at once: the kubelet
    retries it only at its next periodic sync of the pod (60-90 s, pod_workers.go), so
    waiting would only hide the driver's error."""
    node.apply(manifest)

    def started() -> bool:
        if node.running(name):
            return True
        failed = node.prepare_failure(name)
        if failed:
            raise AssertionError(f"pod {name}: {failed}")
        return False

    wait_for(started, f"pod {name} Running", timeout=timeout, interval=0.3)


def pod_level_resources(
    node: Cluster, sizes: Sequence[int], *, sidecar: int = 0, timeout: float = 90
) -> dict[str, CPUSet]:
    """One pod with pod-level resources, a claimed container per entry of `sizes` (a claim of
    that many CPUs each), a native sidecar (restartable init container: it starts, and gets its
    CPUs, before the others) with a claim of `sidecar` CPUs of its own or none, and an
    unclaimed container. Each claimed container runs on exactly its claim's CPUs
    (DRA_CPUSET_<uid>), no two overlap, and the unclaimed ones run beside them on the rest.
    Answers every container's CPUs as the kernel reports them."""
    names = [f"app{i}" for i in range(len(sizes))]
    claimed = dict(zip(names, sizes, strict=True))
    if sidecar:
        claimed["sidecar"] = sidecar
    for name, size in claimed.items():
        node.apply(claim_manifest(name, [cpus_request(size)]))
    manifest = json.loads(
        pod_manifest(
            "mixed",
            [*((n, [n]) for n in names), ("plain", [])],
            [(n, n) for n in claimed],
            extra_spec={
                "resources": {
                    "requests": {"cpu": "100m", "memory": "64Mi"},
                    "limits": {"cpu": "2", "memory": "256Mi"},
                },
                "initContainers": [
                    {
                        "name": "sidecar",
                        "image": TEST_IMAGE,
                        "imagePullPolicy": "Never",
                        "restartPolicy": "Always",
                        "command": SLEEP,
                        "resources": {"claims": [{"name": "sidecar"}] if sidecar else []},
                    }
                ],
            },
        )
    )
    kind = "a claimed sidecar" if sidecar else "a sidecar"
    with step(f"pod with {len(sizes)} claimed containers, {kind} and a shared container"):
        start_pod(node, "mixed", json.dumps(manifest), timeout)
    stored = node.get("pod", "mixed")
    say(f"pod-level resources kept by the API server: {'resources' in stored['spec']}")
    seen: dict[str, CPUSet] = {}
    held = CPUSet()
    for name, size in claimed.items():
        cpus = node.cpus_of("mixed", name)
        assert cpus == claim_cpus(node.env_of("mixed", name)) and len(cpus) == size, name
        assert cpus.isdisjoint(held), (name, cpus, held)
        held = held | cpus
        seen[name] = cpus
    for shared in ("plain", *(() if sidecar else ("sidecar",))):
        cpus = node.cpus_of("mixed", shared)
        assert cpus and cpus.isdisjoint(held), (shared, cpus, held)
        seen[shared] = cpus
    return seen


def claim_everything_published(node: Cluster, *, timeout: float = 90) -> CPUSet:
    """A claim per published device, each as large as that device (largest first, so each
    claim has one device it fits), every pod running; one claim more stays unallocated and
    its pod Pending, and a shared pod runs on exactly what no claim holds: the floor
    (minSharedCPUs) the driver never publishes. Answers the shared pod's CPUs."""
    sizes = capacities(node)
    assert sizes and sum(sizes) < len(node.online())  # the floor is never published
    with step(f"one claim per published device ({sizes} CPUs)"):
        for i, size in enumerate(sizes):
            name = f"all{i}"
            node.apply(claim_manifest(name, [cpus_request(size)]))
            start_pod(node, name, pod_manifest(name, [("work", ["c"])], [("c", name)]), timeout)
        node.apply(claim_manifest("more", [cpus_request(1)]))
        node.apply(pod_manifest("more", [("work", ["c"])], [("c", "more")]))
        start_pod(node, "shared", pod_manifest("shared", [("work", [])]), timeout)
    held = CPUSet()
    for i, size in enumerate(sizes):
        cpus = node.cpus_of(f"all{i}", "work")
        assert len(cpus) == size and cpus.isdisjoint(held), (i, cpus, held)
        held = held | cpus
    shared = node.cpus_of("shared", "work")
    assert shared == node.online() - held, (shared, held)
    assert node.get("pod", "more")["status"]["phase"] == "Pending"
    assert not node.get("resourceclaim", "more").get("status", {}).get("allocation")
    return shared
