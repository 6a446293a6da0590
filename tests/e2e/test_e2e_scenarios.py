"""The chart on a real one-node cluster (kubelet + containerd + runc), scenarios after the
reference driver's user docs. Every pinning check reads the container's process in /proc.

The node may be small (2 CPUs on CI machines): the scenarios size their claims from what the
published devices offer, and the shared-pool floor (minSharedCPUs, default 1) always stays out.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e.scenarios import (
    claim_everything_published,
    grouped_capacity,
    pod_level_resources,
    start_pod,
)
from harness.cluster import (
    NAMESPACE,
    SERVICES,
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

pytestmark = pytest.mark.e2e


@pytest.fixture
def clean(driver: Cluster) -> Iterator[Cluster]:
    """Each scenario leaves no pod or claim behind."""
    yield driver
    driver.kubectl("delete", "pods", "--all", "-n", "default", "--wait=true", "--timeout=120s")
    driver.kubectl("delete", "resourceclaims", "--all", "-n", "default", "--wait=true")


def test_the_kubelet_registers_the_plugin_from_its_own_registry_dir(driver: Cluster) -> None:
    """The chart mounts only <kubelet root>/plugins_registry/dra.cpu; the kubelet's plugin
    watcher finds the socket there (the other scenarios' claims are prepared through it)."""
    node = driver
    registry = Path(node.kubelet_root) / "plugins_registry"
    socket = registry / "dra.cpu" / "dra.cpu-reg.sock"
    assert socket.is_socket()
    assert sorted(p.name for p in registry.glob("dra.cpu*")) == ["dra.cpu"]
    registering = f'RegisterPlugin started" plugin={{"SocketPath":"{socket}"'
    wait_for(
        lambda: registering in node.kubelet_log_of_this_run(),
        "the kubelet registering the plugin from plugins_registry/dra.cpu",
        timeout=30,
        interval=0.3,
    )


def test_grouped_claim_pins_and_the_shared_pool_steps_aside(clean: Cluster) -> None:
    node = clean
    with step("grouped claim of 1 CPU and a shared pod"):
        node.apply(claim_manifest("one", [cpus_request(1)]))
        start_pod(node, "pinned", pod_manifest("pinned", [("work", ["c"])], [("c", "one")]))
        start_pod(node, "shared", pod_manifest("shared", [("work", [])]))
    claimed = claim_cpus(node.env_of("pinned", "work"))
    assert len(claimed) == 1
    assert node.cpus_of("pinned", "work") == claimed
    shared = node.cpus_of("shared", "work")
    assert shared and shared.isdisjoint(claimed)
    for service in SERVICES:  # the driver's own containers are shared containers too
        assert node.cpus_of(node.driver_pod()["metadata"]["name"], service, NAMESPACE).isdisjoint(
            claimed
        ), service


# docs/user/claim-status.md: which CPUs a claim holds, from its status.devices.
STATUS_CPUSET = 'jsonpath={.status.devices[?(@.driver=="dra.cpu")].data.cpuset}'
STATUS_READY = (
    'jsonpath={.status.devices[?(@.driver=="dra.cpu")].conditions[?(@.type=="Ready")].status}'
)


def test_the_claims_status_names_the_cpus_the_kernel_gives_the_pod(clean: Cluster) -> None:
    node = clean
    with step("a claim's CPUs read with kubectl from its status.devices"):
        node.apply(claim_manifest("told", [cpus_request(1)]))
        start_pod(node, "told", pod_manifest("told", [("work", ["c"])], [("c", "told")]))

        def told() -> str:
            return node.kubectl("get", "resourceclaim", "told", "-n", "default", "-o",
                                STATUS_CPUSET).strip()  # fmt: skip

        written = wait_for(told, "the cpuset in the claim's status", timeout=30, interval=0.3)
    assert CPUSet.parse(written) == node.cpus_of("told", "work")
    assert node.kubectl("get", "resourceclaim", "told", "-o", STATUS_READY).strip() == "True"
    with step("the entry goes with the pod"):
        node.delete("pod", "told")
        wait_for(lambda: not told(), "the status entry removed", timeout=60, interval=0.3)


def test_claiming_everything_published_keeps_a_shared_pool(clean: Cluster) -> None:
    """Two one-CPU claims on a 2-CPU node used to empty the shared pool."""
    assert claim_everything_published(clean)


def test_pod_level_resources_claimed_containers_and_a_sidecar(clean: Cluster) -> None:
    """Pod-level resources, each claimed container on its own claim's CPUs, a native sidecar
    (restartable init container) and an unclaimed container on the shared pool."""
    pod_level_resources(clean, [1] * min(2, grouped_capacity(clean)))  # 2 CPUs publish one


def test_an_oversize_claim_is_unschedulable(clean: Cluster) -> None:
    node = clean
    node.apply(claim_manifest("huge", [cpus_request(len(node.online()) + 1)]))
    node.apply(pod_manifest("huge", [("work", ["c"])], [("c", "huge")]))

    def refused() -> bool:
        events = node.get("events")["items"]
        return any(
            e["involvedObject"].get("name") == "huge" and e.get("reason") == "FailedScheduling"
            for e in events
        )

    with step("oversize claim refused by the scheduler"):
        wait_for(refused, "FailedScheduling for the oversize claim", timeout=60, interval=0.3)
    assert node.get("pod", "huge")["status"]["phase"] == "Pending"


def test_a_claim_shared_by_two_containers_is_refused(clean: Cluster) -> None:
    """One container per claim: the second container of the pod is refused at creation."""
    node = clean
    node.apply(claim_manifest("both", [cpus_request(1)]))
    node.apply(pod_manifest("both", [("a", ["c"]), ("b", ["c"])], [("c", "both")]))

    def one_refused() -> dict[str, object] | None:
        pod = node.get("pod", "both")
        statuses = pod.get("status", {}).get("containerStatuses", [])
        running = [s for s in statuses if "running" in s.get("state", {})]
        waiting = [s for s in statuses if "waiting" in s.get("state", {})]
        if len(running) == 1 and waiting and waiting[0]["state"]["waiting"].get("message"):
            return pod
        return None

    with step("second container of a shared claim refused"):
        pod = wait_for(one_refused, "one container running, one refused", timeout=90, interval=0.3)
    statuses = pod["status"]["containerStatuses"]  # type: ignore[index]
    message = next(s for s in statuses if "waiting" in s["state"])["state"]["waiting"]["message"]
    assert "belongs to" in message, message


def test_restarting_each_driver_container_keeps_running_pods_pinned(clean: Cluster) -> None:
    node = clean
    node.apply(claim_manifest("kept", [cpus_request(1)]))
    start_pod(node, "kept", pod_manifest("kept", [("work", ["c"])], [("c", "kept")]))
    start_pod(node, "shared", pod_manifest("shared", [("work", [])]))
    pinned, shared = node.cpus_of("kept", "work"), node.cpus_of("shared", "work")
    for service in SERVICES:
        pod = node.driver_pod()
        assert pod is not None
        name = pod["metadata"]["name"]
        before = {s["name"]: s["restartCount"] for s in pod["status"]["containerStatuses"]}
        with step(f"restart of the {service} container"):
            sandbox = node.crictl("pods", "--name", name, "-q").split()[0]
            ctr = node.crictl("ps", "--name", f"^{service}$", "--pod", sandbox, "-q").split()[0]
            node.crictl("stop", "--timeout", "5", ctr)

            def restarted(service: str = service, before: dict[str, int] = before) -> bool:
                now = node.driver_ready()
                if now is None:
                    return False
                counts = {s["name"]: s["restartCount"] for s in now["status"]["containerStatuses"]}
                return bool(counts[service] > before[service])

            wait_for(restarted, f"{service} restarted and pod Ready", timeout=120, interval=0.3)
        assert node.cpus_of("kept", "work") == pinned, service
        assert node.cpus_of("shared", "work") == shared, service


def test_mode_change_with_a_claim_held_never_hands_its_cpu_out(clean: Cluster) -> None:
    """`helm upgrade` to individual mode while a grouped claim holds a CPU: the CPU is not
    published until the claim goes, so no second claim can be given it."""
    node = clean
    node.apply(claim_manifest("old", [cpus_request(1)]))
    start_pod(node, "old", pod_manifest("old", [("work", ["c"])], [("c", "old")]))
    held = node.cpus_of("old", "work")
    try:
        with step("helm upgrade to individual mode, claim held"):
            old_pod = node.driver_pod()["metadata"]["name"]  # type: ignore[index]
            node.install("driverConfig.cpuDeviceMode=individual")
            node.kubectl("delete", "pod", old_pod, "-n", NAMESPACE, "--wait=true")
            # On a 2-CPU node nothing is left to publish: CPU 0 is the floor, CPU 1 the claim's.
            wait_for(
                lambda: (
                    node.driver_ready()
                    and node.slices()
                    and not any(n.startswith("cpudevnuma") for n in node.published())
                ),
                "individual devices published",
                timeout=120,
                interval=0.3,
            )
        offered = node.published()
        for device in offered.values():
            cpu = device["attributes"]["dra.cpu/cpuID"]["int"]
            assert cpu not in held, (device["name"], held)
        # Individual mode: a CEL selector on our attributes and a matchAttribute constraint.
        request = {
            "name": "cpu",
            "exactly": {
                "deviceClassName": "dra.cpu",
                "count": 1,
                "selectors": [{"cel": {"expression": 'device.attributes["dra.cpu"].cpuID >= 0'}}],
            },
        }
        node.apply(
            claim_manifest(
                "new",
                [request],
                constraints=[{"matchAttribute": "resource.kubernetes.io/numaNode"}],
            )
        )
        node.apply(pod_manifest("new", [("work", ["c"])], [("c", "new")]))
        if not offered:
            # Every CPU is the floor's or the old claim's: the new claim waits for the old one.
            with step("released old claim: its CPU published again"):
                node.delete("pod", "old")
                node.delete("resourceclaim", "old")
        wait_for(lambda: node.running("new"), "pod new Running", timeout=120, interval=0.3)
        got = claim_cpus(node.env_of("new", "work"))
        assert node.cpus_of("new", "work") == got
        if node.running("old"):
            assert got.isdisjoint(held)
    finally:
        with step("helm upgrade back to grouped mode"):
            node.kubectl("delete", "pods", "--all", "-n", "default", "--wait=true")
            node.kubectl("delete", "resourceclaims", "--all", "-n", "default", "--wait=true")
            current = node.driver_pod()
            node.install()
            if current is not None:
                node.kubectl(
                    "delete", "pod", current["metadata"]["name"], "-n", NAMESPACE, "--wait=true"
                )
            wait_for(
                lambda: node.driver_ready() and "cpudevnuma000" in node.published(),
                "grouped devices published again",
                timeout=120,
                interval=0.3,
            )


def test_upgrading_one_image_with_on_delete(clean: Cluster) -> None:
    """`helm upgrade` of the api image's tag with updateStrategy OnDelete: nothing moves until
    the pod is deleted; then the new pod runs the new tag, Ready, with claims kept."""
    node = clean
    node.apply(claim_manifest("kept", [cpus_request(1)]))
    start_pod(node, "kept", pod_manifest("kept", [("work", ["c"])], [("c", "kept")]))
    pinned = node.cpus_of("kept", "work")
    version = node.app_version
    tag = f"{version}-next"
    image = "localhost/dracpu-api"
    node.tag_image(f"{image}:{version}", f"{image}:{tag}")
    before = node.driver_pod()
    assert before is not None
    try:
        with step("helm upgrade of the api image tag, OnDelete"):
            node.install("updateStrategy.type=OnDelete", f"api.image.tag={tag}")
            still = node.driver_pod()
            assert still is not None and still["metadata"]["uid"] == before["metadata"]["uid"]
            node.kubectl(
                "delete", "pod", before["metadata"]["name"], "-n", NAMESPACE, "--wait=true"
            )
            after = wait_for(node.driver_ready, "new driver pod Ready", timeout=120, interval=0.3)
        images = {c["name"]: c["image"] for c in after["spec"]["containers"]}
        assert images["api"] == f"{image}:{tag}"
        assert all(v.endswith(f":{version}") for k, v in images.items() if k != "api"), images
        assert node.cpus_of("kept", "work") == pinned
    finally:
        with step("helm upgrade back to the chart's tags"):
            current = node.driver_pod()
            node.install()
            if current is not None:
                node.kubectl(
                    "delete", "pod", current["metadata"]["name"], "-n", NAMESPACE, "--wait=true"
                )
            wait_for(node.driver_ready, "driver pod Ready", timeout=120, interval=0.3)


MAPPING_GATE = "DRANodeAllocatableResources"
SHARING_REFUSED = "has a mapped device and cannot be shared across pods"


def restart_driver_with(node: Cluster, *values: str) -> dict[str, Any]:
    """`helm upgrade` with `values`; the config checksum changes, so the DaemonSet replaces the
    pod. Returns the new pod once Ready."""
    old = node.driver_pod()
    node.install(*values)
    if old is not None:
        node.delete("pod", old["metadata"]["name"], namespace=NAMESPACE)
    uid = old["metadata"]["uid"] if old else ""

    def replaced() -> dict[str, Any] | None:
        pod = node.driver_ready()
        return pod if pod and pod["metadata"]["uid"] != uid else None

    return wait_for(replaced, "new driver pod Ready", timeout=120, interval=0.3)


def test_node_allocatable_mapping_counts_claimed_cpus(clean: Cluster) -> None:
    """publishNodeAllocatableResourceMapping with the DRANodeAllocatableResources gate on
    every component (tools/cluster.sh): the slices map each device's CPUs to the node's `cpu`,
    and kube-scheduler counts a claim's CPUs against the node's allocatable cpu and keeps a
    mapped claim to one pod."""
    node = clean
    declared = node.get("node", node.node, namespace="")["status"].get("declaredFeatures", [])
    if MAPPING_GATE not in node.env.get("FEATURE_GATES", "") or MAPPING_GATE not in declared:
        pytest.skip(f"the cluster runs without {MAPPING_GATE} (node declares {declared})")
    try:
        with step("helm upgrade with publishNodeAllocatableResourceMapping=true"):
            restart_driver_with(node, "driverConfig.publishNodeAllocatableResourceMapping=true")
            wait_for(
                lambda: (
                    node.published()
                    and all("nodeAllocatableResources" in d for d in node.published().values())
                ),
                "devices published with nodeAllocatableResources",
                timeout=120,
                interval=0.3,
            )
        for device in node.published().values():
            assert device["nodeAllocatableResources"] == {
                "cpu": {"mapping": {"capacityKey": "dra.cpu/cpu", "capacityMultiplier": "1"}}
            }, device
        allocatable = node.cpu_allocatable_millis()
        requested = node.cpu_requested_millis()  # the driver pod's own requests
        with step("claimed pod on a mapped device"):
            node.apply(claim_manifest("mapped", [cpus_request(1)]))
            start_pod(node, "mapped", pod_manifest("mapped", [("work", ["c"])], [("c", "mapped")]))
        claimed = claim_cpus(node.env_of("mapped", "work"))
        assert len(claimed) == 1
        assert node.cpus_of("mapped", "work") == claimed
        assert node.cgroup_cpuset_of("mapped", "work") == claimed
        # What kube-scheduler recorded for the claim when it bound the pod.
        status = node.get("pod", "mapped")["status"]
        recorded = status.get("nodeAllocatableResourceClaimStatuses")
        say(f"mapped pod: qosClass={status.get('qosClass')} claim statuses={json.dumps(recorded)}")
        assert [(r["resourceClaimName"], r["mapping"]) for r in recorded] == [
            ("mapped", [{"name": "cpu", "quantity": "1"}])
        ], recorded

        with step("a second pod on the mapped claim refused by kube-scheduler"):
            node.apply(pod_manifest("sharer", [("work", ["c"])], [("c", "mapped")]))
            message = wait_for(
                lambda: node.scheduling_failure("sharer"),
                "FailedScheduling for the pod sharing a mapped claim",
                timeout=60,
                interval=0.3,
            )
        say(f"scheduler on the shared claim: {message}")
        assert f"node allocatable resource claim mapped {SHARING_REFUSED}" in message, message
        assert node.get("pod", "sharer")["status"]["phase"] == "Pending"
        assert not node.get("pod", "sharer")["spec"].get("nodeName")
        node.delete("pod", "sharer")

        # Fits the node's cpu only if the claim's CPU is not counted.
        big = allocatable - requested - 500
        assert big > 0, (allocatable, requested)
        with step(f"a pod requesting {big}m cpu: unschedulable while the claim holds a CPU"):
            node.apply(
                pod_manifest(
                    "big",
                    [("work", [])],
                    extra_spec={
                        "containers": [
                            {
                                "name": "work",
                                "image": TEST_IMAGE,
                                "imagePullPolicy": "Never",
                                "command": SLEEP,
                                "resources": {"requests": {"cpu": f"{big}m"}},
                            }
                        ]
                    },
                )
            )
            message = wait_for(
                lambda: node.scheduling_failure("big"),
                "FailedScheduling for the pod that no longer fits",
                timeout=60,
                interval=0.3,
            )
        say(f"scheduler on the cpu request: {message}")
        assert "Insufficient cpu" in message, message
        assert node.get("pod", "big")["status"]["phase"] == "Pending"
        with step("claimed pod deleted: the cpu request fits again"):
            node.delete("pod", "mapped")
            wait_for(lambda: node.running("big"), "pod big Running", timeout=90, interval=0.3)
    finally:
        with step("helm upgrade back to the chart's defaults"):
            node.kubectl("delete", "pods", "--all", "-n", "default", "--wait=true")
            node.kubectl("delete", "resourceclaims", "--all", "-n", "default", "--wait=true")
            restart_driver_with(node)
            wait_for(
                lambda: (
                    node.published()
                    and not any("nodeAllocatableResources" in d for d in node.published().values())
                ),
                "devices published without the mapping",
                timeout=120,
                interval=0.3,
            )


def test_uninstall_leaves_nothing_behind(driver: Cluster) -> None:
    """Runs last (file order): helm uninstall removes slices, sockets, CDI specs and records."""
    node = driver
    with step("workloads gone, their claims unprepared by the kubelet"):
        # The kubelet unprepares a deleted pod's claims on its own schedule; a claim still
        # prepared when the driver goes keeps its files (nothing is left to unprepare it).
        node.kubectl("delete", "pods", "--all", "-n", "default", "--wait=true", "--timeout=120s")
        node.kubectl("delete", "resourceclaims", "--all", "-n", "default", "--wait=true")
        wait_for(
            lambda: not list(Path("/var/run/cdi").glob("dra.k8s.io-cpu_claim-*")),
            "every claim unprepared",
            timeout=120,
            interval=0.3,
        )
    with step("helm uninstall"):
        node.helm("uninstall", "dra-driver-cpu", "-n", NAMESPACE, "--wait")
        wait_for(lambda: node.driver_pod() is None, "driver pod gone", timeout=120, interval=0.3)
        wait_for(lambda: not node.slices(), "ResourceSlices removed", timeout=120, interval=0.3)
    leftovers = {
        "plugin sockets": sorted(str(p) for p in (node.dir / "kubelet/plugins").rglob("*.sock")),
        "registration sockets": sorted(
            str(p) for p in (node.dir / "kubelet/plugins_registry").rglob("dra.cpu*.sock")
        ),
        "CDI specs": sorted(str(p) for p in Path("/var/run/cdi").glob("dra.k8s.io-cpu_*")),
        "claim records": sorted(str(p) for p in (node.state_dir / "claims").glob("*.json")),
    }
    say(f"after uninstall: {json.dumps(leftovers)}")
    assert all(not found for found in leftovers.values()), leftovers
