"""The static CPU Manager on one node of the fleet, the host: its kubelet started again with
`--cpu-manager-policy=static --reserved-cpus=0` while the chart runs on both nodes. The host's
driver withdraws its slices and says why (its log, the api's /v1/health, a Warning Event on its
pod) while the guest's keeps publishing what it did; then the steps of docs/user/installation.md
("Moving a node off the CPU Manager") run on the host as the page writes them
(harness.cpu_manager), and its driver publishes again: the same pod, no container restarted.

The module runs before the tier's claimed pods exist (its name sorts first; only the upgrade
module runs before it, and removes its own pods): the page's first step drains the node, which
a pod without a controller would stop."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fleet.nodes import GUEST_NODE, Fleet
from harness.cluster import step
from harness.cpu_manager import (
    assert_said_held_back,
    assert_said_met,
    held_back,
    move_off,
    recorded_policy,
    restarts,
    static_kubelet,
)
from harness.speed import budget
from harness.waits import wait_for

pytestmark = [pytest.mark.fleet, pytest.mark.timeout(2700)]


@pytest.fixture(scope="module")
def static_host(fleet: Fleet, idle: dict[str, dict[str, int]]) -> Iterator[Fleet]:
    """The host's kubelet on the static CPU Manager; afterwards as the other modules expect it
    (no extra flags, policy none) and publishing again."""
    with static_kubelet(fleet.host.node):
        yield fleet
    wait_for(lambda: fleet.capacity_of(fleet.host.node) == idle[fleet.host.node] or None,
             "the host's devices published again", timeout=budget(180),
             interval=1.0)  # fmt: skip


def test_a_static_kubelet_on_one_node_withdraws_its_slices_until_moved_off_as_the_page_says(
    static_host: Fleet, idle: dict[str, dict[str, int]]
) -> None:
    fleet = static_host
    host = fleet.host
    recorded_policy(host.kubelet_root, "static")  # the kubelet's own record
    pod = wait_for(lambda: fleet.ready_drivers().get(host.node), "the host's driver pod Ready",
                   timeout=budget(180), interval=1.0)  # fmt: skip
    name = pod["metadata"]["name"]
    with step("fleet: the host's slices withdrawn, the reason in /v1/health"):
        wait_for(lambda: held_back(host, name), "the host held back", timeout=budget(120),
                 interval=1.0)  # fmt: skip
        wait_for(lambda: not fleet.slices_of(host.node), "the host's slices withdrawn",
                 timeout=budget(120), interval=1.0)  # fmt: skip
    assert fleet.capacity_of(GUEST_NODE) == idle[GUEST_NODE]  # the other node publishes on
    assert_said_held_back(host, name)
    before = restarts(pod)

    move_off(host)  # the page's steps
    with step("fleet: the host's devices published once its kubelet runs none"):
        wait_for(lambda: fleet.capacity_of(host.node) == idle[host.node] or None,
                 "the host's devices published", timeout=budget(120), interval=1.0)  # fmt: skip
    assert_said_met(host, name)
    now = fleet.driver_pods()[host.node]
    assert now["metadata"]["name"] == name
    assert restarts(now) == before  # the same pod, no container restarted
    assert fleet.capacity_of(GUEST_NODE) == idle[GUEST_NODE]
