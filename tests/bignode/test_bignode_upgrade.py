"""The upgrade walk-through in the guest (tests/skew's, run on the guest's real containerd):
three one-CPU claims with their containers running and a shared container; each of the five
services is replaced in turn while every container's cgroup v2 cpuset.cpus.effective and
Cpus_allowed_list are sampled (no change allowed) and a prepare and a pin issued at once are
timed. The table rows are printed: how long each service was away and what waited for it.

The allocator stays stopped 35 s before its replacement starts: longer than the 30 s any fixed
wait of the dra-plugin's could cover, so the prepare issued meanwhile is answered "unavailable,
try again" within the kubelet's deadline and succeeds when tried again, as the kubelet does."""

from __future__ import annotations

import pytest
from harness.guest import Guest

pytestmark = [pytest.mark.bignode, pytest.mark.realnode, pytest.mark.timeout(1200)]
ALLOCATOR_AWAY = 35.0


def test_each_service_replaced_in_turn_moves_no_container(node: Guest) -> None:
    result = node.call("walkthrough", timeout=1100, claims=3, hold={"allocator": ALLOCATOR_AWAY})
    print(
        "\nbignode upgrade: | service | down until ready | prepare waited | pin waited | cpusets |"
    )
    for row in result["rows"]:
        print(f"bignode upgrade: {row}")
    assert len(result["rows"]) == 6  # the baseline and the five services
    assert not result["exited"], result["exited"]
    assert len(result["expected"]) == 4  # three claimed containers and the shared one
    for pid, cpus in result["expected"].items():
        for when in ("before", "after"):
            seen = result[when][pid]
            assert seen["cpus_allowed"] == seen["cpus_effective"] == cpus, (when, seen)
    assert result["before"] == result["after"]
    # The allocator's row: away longer than it was held, its prepare through all the same.
    (allocator,) = [row for row in result["rows"] if row.startswith("| allocator |")]
    assert float(allocator.split("|")[2].removesuffix(" s ").strip()) > ALLOCATOR_AWAY
