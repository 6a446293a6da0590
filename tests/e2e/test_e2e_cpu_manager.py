"""A node whose kubelet runs the static CPU Manager, on the one-node cluster: its kubelet is
started with `--cpu-manager-policy=static --reserved-cpus=0` (DRACPU_CLUSTER_KUBELET_FLAGS of
tools/cluster.sh), the chart installed on it publishes nothing and says why in the dra-plugin's
log, the api's /v1/health and an Event on its pod; then the steps of docs/user/installation.md
("Moving a node off the CPU Manager") run as the page writes them, and the driver publishes.

The page's commands run in bash as written, with this cluster's stand-ins
(harness.cpu_manager)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from harness.cluster import NAMESPACE, RELEASE, Cluster, step
from harness.cpu_manager import (
    PAGE,
    SECTION,
    STEPS,
    assert_said_held_back,
    assert_said_met,
    held_back,
    move_off,
    recorded_policy,
    restarts,
    static_kubelet,
)
from harness.page_steps import numbered_steps
from harness.waits import never, wait_for

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def static_node(cluster: Cluster) -> Iterator[Cluster]:
    """The cluster without the driver, its kubelet on the static CPU Manager; afterwards the
    kubelet as the other modules expect it (no extra flags, policy none)."""
    with step("the release removed"):
        cluster.helm("uninstall", RELEASE, "-n", NAMESPACE, "--ignore-not-found", "--wait")
        wait_for(lambda: cluster.driver_pod() is None, "driver pod gone", timeout=120,
                 interval=0.3)  # fmt: skip
    with static_kubelet(cluster.node):
        yield cluster


def test_the_page_steps_are_the_ones_run_here() -> None:
    assert [title for title, _ in numbered_steps(PAGE, SECTION)] == STEPS


def test_a_static_kubelet_gets_no_slices_until_moved_off_as_the_page_says(
    static_node: Cluster,
) -> None:
    node = static_node
    recorded_policy(node.kubelet_root, "static")  # the kubelet's own record
    with step("helm install on the static node"):
        node.install()
        pod = wait_for(node.driver_ready, "driver pod Ready", timeout=180, interval=0.3)
    name = pod["metadata"]["name"]
    with step("nothing published, the reason in /v1/health"):
        asyncio.run(never(node.slices, "a ResourceSlice published while the kubelet is static",
                          until=lambda: held_back(node, name), within=120,
                          interval=0.5))  # fmt: skip
    assert_said_held_back(node, name)
    before = restarts(pod)

    move_off(node)  # the page's steps
    with step("published once the kubelet runs none"):
        wait_for(node.published, "ResourceSlices published", timeout=120, interval=0.5)
    assert_said_met(node, name)
    after_pod = node.driver_pod()
    assert after_pod is not None and after_pod["metadata"]["name"] == name
    assert restarts(after_pod) == before  # the same pod, no container restarted
