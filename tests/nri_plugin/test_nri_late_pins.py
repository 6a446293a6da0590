"""The late-pin window made visible: a claimed container the runtime started without the
plugin's CreateContainer adjustment (the runtime's plugin_request_timeout expired, or no plugin
was connected) runs on every CPU until the plugin pins it at the next Synchronize; the plugin
then warns, naming the container and its claims, and counts it in dra_cpu_nri_late_pins_total.
Driven through the runtime stand-in over the real transport, with the real allocator."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest
from harness.log_lines import LogLines
from harness.nri_bed import ONLINE, Bed, claim_env, prepare_seen
from harness.waits import eventually

from dracpu.core.cpuset import CPUSet
from dracpu.dev.runtime_sim import RuntimeProfile
from dracpu.pb.nri import api_pb2

LATE = "claimed container pinned late: it ran on other CPUs until now"


def late_pins(bed: Bed) -> float:
    match = re.search(r"^dra_cpu_nri_late_pins_total (\S+)$", bed.plugin.metrics.text(), re.M)
    assert match, "dra_cpu_nri_late_pins_total is exported"
    return float(match.group(1))


async def resynchronized(bed: Bed, connects: int) -> None:
    await eventually(lambda: bed.stub.status.connects > connects, "reconnect", timeout=10)
    await bed.runtime.wait_plugin()
    await eventually(lambda: bed.stub.ready, "synchronized again", timeout=10)


async def pinned_late(
    bed: Bed, monkeypatch: pytest.MonkeyPatch, uid: str, cpus: CPUSet, answer: Any
) -> str:
    """A claimed container created while the allocator's attach is `answer` (a stand-in too
    slow for the runtime, which gives up, drops the plugin and creates the container
    unadjusted); then the real attach back, the runtime reconnected, and the container pinned
    at the new Synchronize. Its id."""
    allocator = bed.client  # the plugin's allocator client
    attach = allocator.attach
    monkeypatch.setattr(allocator, "attach", answer(attach))
    connects = bed.stub.status.connects
    pod = bed.runtime.add_pod("db")
    claimed = await bed.runtime.create_container(pod, "postgres", claim_env((uid, cpus)))
    assert bed.runtime.cpus(claimed) == ""
    monkeypatch.setattr(allocator, "attach", attach)
    await resynchronized(bed, connects)
    await bed.runtime.wait_for(lambda: bed.runtime.cpus(claimed) == cpus.format())
    return claimed


async def test_a_claimed_container_created_without_the_plugin_is_pinned_late_and_named(
    bed: Bed, lines: LogLines
) -> None:
    uid, cpus = await prepare_seen(bed, 2)
    assert late_pins(bed) == 0
    connects = bed.stub.status.connects
    await bed.runtime.stop()  # no plugin connected: containers are created without asking it
    db = bed.runtime.add_pod("db")
    web = bed.runtime.add_pod("web")
    claimed = await bed.runtime.create_container(db, "postgres", claim_env((uid, cpus)))
    shared = await bed.runtime.create_container(web, "nginx")
    assert bed.runtime.cpus(claimed) == ""  # no cpuset: every CPU its cgroup parent allows
    await bed.runtime.start()
    await resynchronized(bed, connects)

    assert CPUSet.parse(bed.runtime.cpus(claimed)) == cpus
    assert CPUSet.parse(bed.runtime.cpus(shared)) == ONLINE - cpus
    # Only the claimed container is a late pin; the shared one is a re-pin like any other.
    assert late_pins(bed) == 1
    [warned] = lines.said(LATE)
    assert warned["container"] == "default/db/postgres"
    assert warned["container_id"] == claimed
    assert warned["claims"] == uid
    assert warned["cpus"] == cpus
    assert warned["ran_on"] == "any (no cpuset)"
    assert "not connected" in warned["why"]


async def test_a_claims_container_run_again_while_the_plugin_was_away_gets_the_claim_again(
    bed: Bed, lines: LogLines
) -> None:
    """The claim's container stopped, and while no plugin was connected the node ran it again
    (a new container id, the same pod and name) beside another container of the pod that
    presents the same claim. At the Synchronize the claim's own container is pinned to it
    again; the other one is refused the claim (a claim belongs to one container) and runs on
    the shared pool, off the claim's CPUs."""
    uid, cpus = await prepare_seen(bed, 2)
    pod = bed.runtime.add_pod("db")
    first = await bed.runtime.create_container(pod, "postgres", claim_env((uid, cpus)))
    assert CPUSet.parse(bed.runtime.cpus(first)) == cpus
    connects = bed.stub.status.connects
    await bed.runtime.stop()
    await bed.runtime.stop_container(first)
    await bed.runtime.remove_container(first)
    again = await bed.runtime.create_container(pod, "postgres", claim_env((uid, cpus)))
    other = await bed.runtime.create_container(pod, "migrate", claim_env((uid, cpus)))
    await bed.runtime.start()
    await resynchronized(bed, connects)

    assert CPUSet.parse(bed.runtime.cpus(again)) == cpus
    assert CPUSet.parse(bed.runtime.cpus(other)) == ONLINE - cpus
    held = await bed.allocator.claim(uid)
    assert held.owner.container_id == again and held.owner_running
    [refused] = lines.said("claim on running container not accepted")
    assert refused["container"] == other and "cannot also be used" in refused["error"]


@pytest.mark.parametrize(
    "profile", [pytest.param(RuntimeProfile(request_timeout=0.3), id="request-timeout-0.3s")]
)
async def test_an_answer_after_the_runtime_request_timeout_is_a_late_pin(
    bed: Bed, lines: LogLines, monkeypatch: pytest.MonkeyPatch
) -> None:
    uid, cpus = await prepare_seen(bed, 2)

    def slow(attach: Any) -> Any:
        async def slow_attach(*args: Any, **kwargs: Any) -> Any:
            await asyncio.sleep(0.6)  # longer than the runtime waits
            return await attach(*args, **kwargs)

        return slow_attach

    await pinned_late(bed, monkeypatch, uid, cpus, slow)
    assert late_pins(bed) == 1
    [warned] = lines.said(LATE)
    assert (warned["container"], warned["claims"]) == ("default/db/postgres", uid)
    assert "plugin_request_timeout (0.3s)" in warned["why"]
    # Already when the answer was late, the plugin said the container starts without it.
    [overdue] = [r for r in lines.records if r.getMessage().startswith("CreateContainer took")]
    assert overdue.fields["container"] == "default/db/postgres"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "profile", [pytest.param(RuntimeProfile(request_timeout=0.3), id="request-timeout-0.3s")]
)
async def test_a_call_the_runtime_cuts_off_before_our_clock_runs_out_is_still_its_timeout(
    bed: Bed, lines: LogLines, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runtime's timeout starts when it sends CreateContainer, ours when the request
    arrives: on a loaded node it drops the connection while our own clock says there is time
    left. The plugin here believes the runtime waits 5 s (as if the request came that late);
    the runtime gives up at 0.3 s. The late pin is still the timeout's, not "not connected"."""
    uid, cpus = await prepare_seen(bed, 2)
    never = asyncio.Event()

    def stuck(attach: Any) -> Any:
        async def stuck_attach(*args: Any, **kwargs: Any) -> Any:
            await never.wait()  # cut off by the runtime's drop
            return await attach(*args, **kwargs)

        return stuck_attach

    monkeypatch.setattr(bed.plugin.pacer, "request_timeout", 5.0)
    await pinned_late(bed, monkeypatch, uid, cpus, stuck)
    assert late_pins(bed) == 1
    [warned] = lines.said(LATE)
    assert warned["why"].startswith("the runtime dropped the connection"), warned["why"]
    assert "plugin_request_timeout" in warned["why"]
    [overdue] = [r for r in lines.records if r.getMessage().startswith("CreateContainer took")]
    assert overdue.fields["container"] == "default/db/postgres"  # type: ignore[attr-defined]


async def test_containers_pinned_in_time_or_not_started_are_no_late_pins(
    bed: Bed, lines: LogLines
) -> None:
    first = await prepare_seen(bed, 1)
    second = await prepare_seen(bed, 1)
    pod = bed.runtime.add_pod("db")
    in_time = await bed.runtime.create_container(pod, "postgres", claim_env(first))
    assert CPUSet.parse(bed.runtime.cpus(in_time)) == first[1]
    connects = bed.stub.status.connects
    await bed.runtime.stop()
    waiting = await bed.runtime.create_container(pod, "replica", claim_env(second))
    # Created, never started: pinned at Synchronize before it runs anything.
    bed.runtime.containers[waiting].state = api_pb2.CONTAINER_CREATED
    await bed.runtime.start()
    await resynchronized(bed, connects)

    assert CPUSet.parse(bed.runtime.cpus(waiting)) == second[1]
    assert late_pins(bed) == 0
    assert lines.said(LATE) == []
