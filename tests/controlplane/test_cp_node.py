"""A Node deleted and created again (a new UID): the garbage collector removes the slices the
old Node owned, the plugin publishes them again owned by the new one, and then leaves them."""

from __future__ import annotations

import pytest
from controlplane.checks import complete, slices, stays_unchanged
from harness.control_plane import ControlPlane
from harness.driver_stack import DriverStack
from harness.waits import wait_for

pytestmark = [pytest.mark.controlplane, pytest.mark.timeout(600)]
NODE = "recreated-node"
STACK_CONFIG = {"cpuDeviceMode": "individual"}


def owners(cp: ControlPlane) -> set[str]:
    return {r["uid"] for s in slices(cp, NODE) for r in s["metadata"].get("ownerReferences", [])}


async def test_slices_follow_the_new_node_uid_and_stay(
    control_plane: ControlPlane, stack: DriverStack
) -> None:
    cp = control_plane
    old = cp.register_node(NODE)
    await stack.start()
    wait_for(
        lambda: complete(slices(cp, NODE), 40) and owners(cp) == {old},
        "slices owned by the Node",
        timeout=60,
        interval=0.2,
    )

    cp.kubectl("delete", "node", NODE, "--wait=true")
    new = cp.register_node(NODE)
    assert new != old
    wait_for(
        lambda: complete(slices(cp, NODE), 40) and owners(cp) == {new},
        "slices owned by the new Node",
        timeout=90,
        interval=0.2,
    )
    assert (await stack.status()).node_uid == new
    assert "the Node was recreated; slices follow its new UID" in stack.plugin_log() or (
        "no Node object found" in stack.plugin_log()
    )
    # Converged: neither the garbage collector nor the plugin touches them any more.
    await stays_unchanged(cp, NODE, 5)
