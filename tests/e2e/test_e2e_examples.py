"""Every file of examples/ applied to the one-node cluster, the chart installed with the values
its `# chart:` line names, and the pod's claimed container checked against its `# expect:`
line from the kernel: /proc/<pid>/status of the container's process and the node's /sys.

What the cluster changes in each file, and why:
- the pod gets `hostNetwork: true` (as every test pod here), the cluster's busybox image
  with `imagePullPolicy: Never` (no registry), a toleration of every taint and a short grace
  period (tests/harness/cluster.py `pod_manifest` does the same);
- a claim bigger than the node's largest device (2 CPUs here, one of them the shared pool's
  floor) is made as large as that device, in whole cores where the example asks for them, and
  the pod's CPU requests with it (`Example.scaled`);
- an example whose `# needs:` line names what the cluster lacks (a GPU driver) is applied as a
  server-side dry run only (the API server takes it as written), then skipped with that line
  as the reason."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e.scenarios import start_pod
from harness.cluster import (
    GRACE_SECONDS,
    NAMESPACE,
    RELEASE,
    TEST_IMAGE,
    Cluster,
    claim_cpus,
    say,
    step,
)
from harness.examples import Example, claims_of, examples
from harness.waits import wait_for

from dracpu.core.cpuset import CPUSet
from dracpu.core.driver import (
    INDIVIDUAL_DEVICE_PREFIX,
    MACHINE_DEVICE,
    NUMA_DEVICE_PREFIX,
    SOCKET_DEVICE_PREFIX,
)

pytestmark = pytest.mark.e2e

# The chart's defaults first, then one helm upgrade per other set of values.
EXAMPLES = sorted(examples(), key=lambda e: (e.chart_values != (), e.chart_values, e.name))
SYS_CPU = Path("/sys/devices/system/cpu")
SYS_NODE = Path("/sys/devices/system/node")


def device_names(values: tuple[str, ...]) -> re.Pattern[str]:
    """The names the chart's devices get with these values (core.driver's device names)."""
    settings = dict(item.partition("=")[::2] for item in values)
    if settings.get("driverConfig.cpuDeviceMode") == "individual":
        return re.compile(rf"{INDIVIDUAL_DEVICE_PREFIX}[0-9]+")
    group = settings.get("driverConfig.groupBy", "numanode")
    if group == "machine":
        return re.compile(MACHINE_DEVICE)
    prefix = SOCKET_DEVICE_PREFIX if group == "socket" else NUMA_DEVICE_PREFIX
    return re.compile(rf"{prefix}[0-9]+")


class Modes:
    """The chart's values on the cluster, changed only when an example needs others."""

    def __init__(self, node: Cluster) -> None:
        self.node = node
        self.current: tuple[str, ...] = ()

    def use(self, values: tuple[str, ...]) -> None:
        """The chart upgraded to `values`, and a driver pod of the DaemonSet's new template
        Ready with the devices those values name published. A pod of an older template still
        running is deleted (the DaemonSet makes the new one)."""
        if values == self.current:
            return
        node = self.node
        with step(f"helm upgrade with {' '.join(values) or 'the defaults'}"):
            node.install(*values)
            pattern = device_names(values)

            def published() -> bool:
                generation = str(
                    node.get("daemonset", RELEASE, namespace=NAMESPACE)["metadata"]["generation"]
                )
                pod = node.driver_pod()
                if pod is None:
                    return False
                labels = pod["metadata"].get("labels", {})
                if labels.get("pod-template-generation") != generation:
                    node.delete("pod", pod["metadata"]["name"], namespace=NAMESPACE)
                    return False
                names = list(node.published())
                return bool(
                    node.driver_ready() and names and all(pattern.fullmatch(name) for name in names)
                )

            wait_for(published, f"devices {pattern.pattern} published", timeout=120, interval=0.3)
        self.current = values


@pytest.fixture(scope="module")
def modes(driver: Cluster) -> Iterator[Modes]:
    switch = Modes(driver)
    try:
        yield switch
    finally:
        driver.kubectl("delete", "pods", "--all", "-n", "default", "--wait=true")
        driver.kubectl("delete", "resourceclaims", "--all", "-n", "default", "--wait=true")
        switch.use(())


def for_this_cluster(document: dict[str, Any]) -> dict[str, Any]:
    if document["kind"] != "Pod":
        return document
    spec = document["spec"]
    spec["hostNetwork"] = True
    spec["terminationGracePeriodSeconds"] = GRACE_SECONDS
    spec["tolerations"] = [{"operator": "Exists"}]
    for container in spec["containers"]:
        container["image"] = TEST_IMAGE
        container["imagePullPolicy"] = "Never"
    return document


def smt_width() -> int:
    return len(CPUSet.parse((SYS_CPU / "cpu0/topology/thread_siblings_list").read_text().strip()))


def sized_for(node: Cluster, example: Example) -> Example:
    """The example as it is when the node's largest device holds it, else scaled down to that
    device (whole cores where it asks for them); skipped when not even that fits."""
    devices = node.published().values()
    if "cpuset" in example.expect:
        wanted = CPUSet.parse(example.expect["cpuset"])
        offered = CPUSet()
        for device in devices:
            offered = offered | CPUSet.parse(device["attributes"]["dra.cpu/cpuIDs"]["string"])
        if not wanted.issubset(offered):
            pytest.skip(f"{example.name}: names CPUs {wanted}, the node publishes {offered}")
        return example
    capacities = [int(d["capacity"]["dra.cpu/cpu"]["value"]) for d in devices if "capacity" in d]
    fits = max(capacities) if capacities else len(devices)
    if example.claimed_cpus() <= fits:
        return example
    step_of = smt_width() if "whole-cores" in example.expect else 1
    size = fits - fits % step_of
    if size == 0:
        pytest.skip(f"{example.name}: the node's largest device has {fits} CPUs, less than a core")
    say(f"{example.name}: {example.claimed_cpus()} CPUs scaled to {size}, what the node holds")
    return example.scaled(size)


def cpu_numa_node(cpu: int) -> int:
    for node_dir in SYS_NODE.glob("node[0-9]*"):
        if cpu in CPUSet.parse((node_dir / "cpulist").read_text().strip()):
            return int(node_dir.name.removeprefix("node"))
    return 0  # a kernel without NUMA: one node


def cpu_socket(cpu: int) -> int:
    return int((SYS_CPU / f"cpu{cpu}/topology/physical_package_id").read_text())


def siblings(cpu: int) -> CPUSet:
    return CPUSet.parse((SYS_CPU / f"cpu{cpu}/topology/thread_siblings_list").read_text().strip())


def mems_allowed(node: Cluster, pod: str, container: str) -> CPUSet:
    pid = node.container_pid(pod, container)
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Mems_allowed_list:"):
            return CPUSet.parse(line.split(":", 1)[1].strip())
    raise AssertionError(f"/proc/{pid}/status has no Mems_allowed_list")


Check = Callable[[Cluster, str, str, CPUSet, str], None]


def check_count(node: Cluster, pod: str, container: str, cpus: CPUSet, value: str) -> None:
    assert len(cpus) == int(value), (pod, cpus)


def check_cpuset(node: Cluster, pod: str, container: str, cpus: CPUSet, value: str) -> None:
    assert cpus == CPUSet.parse(value), (pod, cpus)


def check_one_numa_node(node: Cluster, pod: str, container: str, cpus: CPUSet, _: str) -> None:
    assert len({cpu_numa_node(cpu) for cpu in cpus}) == 1, (pod, cpus)


def check_one_socket(node: Cluster, pod: str, container: str, cpus: CPUSet, _: str) -> None:
    assert len({cpu_socket(cpu) for cpu in cpus}) == 1, (pod, cpus)


def check_whole_cores(node: Cluster, pod: str, container: str, cpus: CPUSet, _: str) -> None:
    for cpu in cpus:
        assert siblings(cpu).issubset(cpus), (pod, cpu, siblings(cpu), cpus)


def check_even(node: Cluster, pod: str, container: str, cpus: CPUSet, _: str) -> None:
    shares: dict[int, int] = {}
    for cpu in cpus:
        shares[cpu_numa_node(cpu)] = shares.get(cpu_numa_node(cpu), 0) + 1
    assert max(shares.values()) - min(shares.values()) <= 1, (pod, shares)


def check_local_memory(node: Cluster, pod: str, container: str, cpus: CPUSet, _: str) -> None:
    numa = CPUSet(cpu_numa_node(cpu) for cpu in cpus)
    assert mems_allowed(node, pod, container) == numa, (pod, cpus)


CHECKS: dict[str, Check] = {
    "cpus": check_count,
    "cpuset": check_cpuset,
    "one-numa-node": check_one_numa_node,
    "one-socket": check_one_socket,
    "whole-cores": check_whole_cores,
    "even-across-numa": check_even,
    "numa-local-memory": check_local_memory,
}


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.name for e in EXAMPLES])
def test_the_example_runs_pinned_as_its_comment_says(modes: Modes, example: Example) -> None:
    node = modes.node
    if example.needs:
        # What the cluster lacks is another driver: the API server still takes every
        # document as written (a server-side dry run), then the pinning is left unchecked.
        for document in example.documents:
            node.kubectl(
                "apply", "--dry-run=server", "-n", "default", "-f", "-",
                stdin=json.dumps(document),
            )  # fmt: skip
        pytest.skip(f"{example.name}: needs {example.needs} (the API server took it as written)")
    modes.use(example.chart_values)
    sized = sized_for(node, example)
    expect = dict(example.expect)
    if "cpus" in expect:
        expect["cpus"] = str(sized.claimed_cpus())
    pod = sized.pod["metadata"]["name"]
    try:
        with step(f"kubectl apply -f examples/{example.path.name}"):
            for document in sized.documents:
                if document["kind"] != "Pod":
                    node.apply(json.dumps(for_this_cluster(document)))
            start_pod(node, pod, json.dumps(for_this_cluster(sized.pod)))
        for container in sized.pod["spec"]["containers"]:
            if not claims_of(container):
                continue
            name = container["name"]
            cpus = node.cpus_of(pod, name)
            assert cpus == claim_cpus(node.env_of(pod, name)), (pod, cpus)
            for word, value in expect.items():
                CHECKS[word](node, pod, name, cpus, value)
            say(f"{example.name}: {name} runs on CPUs {cpus} ({' '.join(expect)})")
    finally:
        node.delete("pod", pod)
        node.delete("resourceclaimtemplate", sized.template["metadata"]["name"])
        node.kubectl("delete", "resourceclaims", "--all", "-n", "default", "--wait=true")


def test_every_check_an_example_names_is_made_here() -> None:
    from harness.examples import CHECKS as DESCRIBED

    assert set(CHECKS) == set(DESCRIBED)
