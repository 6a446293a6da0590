"""The external allocator on the real one-node cluster, played as the reference's docs describe
a scheduler plugin: it reads the grouped device's `dra.cpu/cpuIDs` and `dra.cpu/smtLayout`,
writes the claim's `status.allocation` with the chosen cpuset in the opaque configuration,
reserves the claim for the pod and binds the pod. The kubelet and the driver do the rest; the
kernel says where the container runs."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness.cluster import NAMESPACE, Cluster, claim_manifest, cpus_request, pod_manifest, step
from harness.waits import wait_for

from dracpu.core.cpuset import CPUSet

pytestmark = pytest.mark.e2e

# No scheduler serves this name: the test is the pod's scheduler.
SCHEDULER = "dracpu-external-allocator"
REQUEST = "cpus"


def restart_driver_with(node: Cluster, *values: str) -> None:
    """`helm upgrade` with `values` and wait for the replacement pod to be Ready."""
    old = node.driver_pod()
    node.install(*values)
    if old is not None:
        node.delete("pod", old["metadata"]["name"], namespace=NAMESPACE)
    uid = old["metadata"]["uid"] if old else ""

    def replaced() -> dict[str, Any] | None:
        pod = node.driver_ready()
        return pod if pod and pod["metadata"]["uid"] != uid else None

    wait_for(replaced, "new driver pod Ready", timeout=120, interval=0.3)


@pytest.fixture(scope="module")
def external(driver: Cluster) -> Iterator[Cluster]:
    """The driver with `allocator: external` (NUMA grouping), the chart's defaults after."""
    node = driver
    try:
        with step("helm upgrade with driverConfig.allocator=external"):
            restart_driver_with(node, "driverConfig.allocator=external")
            wait_for(
                lambda: (
                    node.published()
                    and all("dra.cpu/cpuIDs" in d["attributes"] for d in node.published().values())
                ),
                "grouped devices published with dra.cpu/cpuIDs",
                timeout=120,
                interval=0.3,
            )
        yield node
    finally:
        with step("helm upgrade back to the chart's defaults"):
            node.kubectl("delete", "pods", "--all", "-n", "default", "--wait=true")
            node.kubectl("delete", "resourceclaims", "--all", "-n", "default", "--wait=true")
            restart_driver_with(node)
            wait_for(
                lambda: (
                    node.published()
                    and not any(
                        "dra.cpu/cpuIDs" in d["attributes"] for d in node.published().values()
                    )
                ),
                "devices published without the external allocator's attributes",
                timeout=120,
                interval=0.3,
            )


@pytest.fixture
def clean(external: Cluster) -> Iterator[Cluster]:
    yield external
    external.kubectl("delete", "pods", "--all", "-n", "default", "--wait=true", "--timeout=120s")
    external.kubectl("delete", "resourceclaims", "--all", "-n", "default", "--wait=true")


def online() -> CPUSet:
    return CPUSet.parse(Path("/sys/devices/system/cpu/online").read_text().strip())


def opaque(cpuset: CPUSet) -> dict[str, Any]:
    parameters = {"apiVersion": "v1alpha1", "cpuConfig": {"cpuset": cpuset.format()}}
    return {"driver": "dra.cpu", "parameters": parameters}


def allocate_and_bind(node: Cluster, name: str, device: dict[str, Any], cpuset: CPUSet) -> None:
    """What a scheduler plugin does at binding: the claim and a pod for it, the claim's
    allocation (device, consumed capacity, the cpuset in the opaque configuration) and
    reservation written to its status, then the pod bound to the node."""
    node.apply(
        claim_manifest(
            name,
            [cpus_request(len(cpuset), REQUEST)],
            config=[{"requests": [REQUEST], "opaque": opaque(cpuset)}],
        )
    )
    node.apply(
        pod_manifest(
            name, [("work", ["c"])], [("c", name)], extra_spec={"schedulerName": SCHEDULER}
        )
    )
    pod_uid = node.get("pod", name)["metadata"]["uid"]
    pool = node.slices()[0]["spec"]["pool"]["name"]
    status = {
        "allocation": {
            "devices": {
                "results": [
                    {
                        "request": REQUEST,
                        "driver": "dra.cpu",
                        "pool": pool,
                        "device": device["name"],
                        "shareID": str(uuid.uuid4()),
                        "consumedCapacity": {"dra.cpu/cpu": str(len(cpuset))},
                    }
                ],
                "config": [
                    {"source": "FromClaim", "requests": [REQUEST], "opaque": opaque(cpuset)}
                ],
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {
                        "matchFields": [
                            {"key": "metadata.name", "operator": "In", "values": [node.node]}
                        ]
                    }
                ]
            },
        },
        "reservedFor": [{"resource": "pods", "name": name, "uid": pod_uid}],
    }
    node.kubectl(
        "patch", "resourceclaim", name, "-n", "default", "--subresource=status",
        "--type=merge", "-p", json.dumps({"status": status}),
    )  # fmt: skip
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": name, "namespace": "default"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node.node},
    }
    node.kubectl(
        "create", "--raw", f"/api/v1/namespaces/default/pods/{name}/binding", "-f", "-",
        stdin=json.dumps(binding),
    )  # fmt: skip


def first_device(node: Cluster) -> dict[str, Any]:
    devices: list[dict[str, Any]] = sorted(node.published().values(), key=lambda d: str(d["name"]))
    assert devices, "no device published"
    return devices[0]


def test_the_kubelet_runs_the_container_on_the_cpuset_the_allocator_wrote(clean: Cluster) -> None:
    node = clean
    device = first_device(node)
    attributes = device["attributes"]
    allowed = CPUSet.parse(attributes["dra.cpu/cpuIDs"]["string"])
    layout = attributes["dra.cpu/smtLayout"]["string"]
    assert len(allowed) == int(device["capacity"]["dra.cpu/cpu"]["value"])
    assert allowed.issubset(online()) and allowed != online()  # the floor is never offered
    # The layout covers the node: every online CPU is in one of its entries.
    covered = CPUSet()
    for entry in layout.split(";"):
        covered = covered | CPUSet.parse(entry.partition(">")[0])
    assert covered == online(), layout
    # The allocator's choice: the device's highest CPU, which the driver's own placement
    # (packed, lowest first) would not pick when the group has more than one.
    chosen = CPUSet([max(allowed)])
    with step(f"external allocation of CPUs {chosen.format()} on {device['name']}"):
        allocate_and_bind(node, "picked", device, chosen)
        wait_for(
            lambda: node.running("picked") or _failed(node, "picked"),
            "pod picked Running",
            timeout=90,
            interval=0.3,
        )
    assert node.cpus_of("picked", "work") == chosen
    assert node.cgroup_cpuset_of("picked", "work") == chosen
    assert node.get("pod", "picked")["spec"]["nodeName"] == node.node


def test_a_cpuset_outside_the_devices_group_is_refused_in_the_pods_events(
    clean: Cluster,
) -> None:
    node = clean
    device = first_device(node)
    group = CPUSet.parse(device["attributes"]["dra.cpu/cpuIDs"]["string"])
    # A CPU of another NUMA node when the node has one, else one the node does not have.
    others = [d for d in node.published().values() if d["name"] != device["name"]]
    if others:
        outside = CPUSet([min(CPUSet.parse(others[0]["attributes"]["dra.cpu/cpuIDs"]["string"]))])
    else:
        outside = CPUSet([max(online()) + 1])
    assert not outside & group
    with step(f"external allocation of CPUs {outside.format()} on {device['name']}"):
        allocate_and_bind(node, "astray", device, outside)
        message = wait_for(
            lambda: node.prepare_failure("astray"),
            "FailedPrepareDynamicResources for the pod",
            timeout=90,
            interval=0.3,
        )
    assert (
        f"opaque config cpuset {outside.format()} has CPUs {outside.format()} outside the "
        f"device's numanode (CPUs {group.format()})"
    ) in message, message
    assert not node.running("astray")


def _failed(node: Cluster, pod: str) -> bool:
    failed = node.prepare_failure(pod)
    if failed:
        raise AssertionError(f"pod {pod}: {failed}")
    return False
