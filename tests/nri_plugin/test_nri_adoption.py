"""A container the runtime created while the plugin registered: its CreateContainer went out
before the plugin was registered and its creation was still in flight when the runtime took the
Synchronize snapshot (CRI-O holds neither), so the plugin first hears of it at its
PostStartContainer, running on whatever CPUs its spec allowed. The plugin adopts it there and
moves it onto its cpuset at once: with its own UpdateContainers where the runtime takes them,
else by registering again (the new Synchronize answer carries every container's cpuset).
Driven through the runtime stand-in over the real transport, with the real allocator."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from typing import Any

import pytest
from harness.log_lines import LogLines
from harness.nri_bed import ONLINE, Bed, claim_env, prepare_seen
from harness.waits import eventually

from dracpu.dev.runtime_sim import CRIO_1_34, RuntimeProfile
from dracpu.nri_plugin.transport.ttrpc import TtrpcError
from dracpu.pb.nri import api_pb2

ADOPTED = (
    "container unknown to the plugin adopted at PostStartContainer: the runtime created it while "
    "the plugin was registering"
)
SETTLED = "adopted container now on its cpuset; it ran off it until now"
RESYNCING = "resynchronizing with the runtime"
LOST = "runtime connection lost; containers created until it is back run unpinned"

BOTH = pytest.mark.parametrize(
    "profile",
    [
        pytest.param(CRIO_1_34, id="cri-o-1.34-registers-again"),
        pytest.param(RuntimeProfile(), id="containerd-2.4-updates"),
    ],
)


def metric(bed: Bed, name: str) -> float:
    match = re.search(rf"^{name} (\S+)$", bed.plugin.metrics.text(), re.M)
    assert match, f"{name} is exported"
    return float(match.group(1))


async def created_while_registering(
    bed: Bed, pod: str, names_envs: dict[str, list[str]]
) -> list[str]:
    """Containers whose CreateContainer went out while no plugin was registered, in flight
    while the plugin registered again and synchronized, then created and started: their ids."""
    connects = bed.stub.status.connects
    await bed.runtime.stop()  # the plugin is dropped and cannot register until start()
    await eventually(lambda: not bed.stub.ready, "the plugin to see the runtime gone")
    pending = [await bed.runtime.begin_create(pod, name, env) for name, env in names_envs.items()]
    await bed.runtime.start()
    await eventually(
        lambda: bed.stub.status.connects > connects and bed.stub.ready,
        "the plugin registered and synchronized again",
    )
    ids = [await bed.runtime.finish_create(p) for p in pending]
    assert not any(bed.plugin.registry.get(cid) for cid in ids), "not in the snapshot"
    for cid in ids:
        await bed.runtime.start_container(cid)
    return ids


@BOTH
async def test_containers_created_while_the_plugin_registers_end_on_their_cpusets(
    bed: Bed, lines: LogLines, profile: RuntimeProfile
) -> None:
    uid, cpus = await prepare_seen(bed, 2)
    pool = ONLINE - cpus
    pod = bed.runtime.add_pod("race")
    claimed, shared = await created_while_registering(
        bed, pod, {"claimed": claim_env((uid, cpus)), "shared": ["PATH=/usr/bin"]}
    )
    # They started on every CPU: the runtime never had the plugin's answer for them.
    await bed.runtime.wait_for(
        lambda: (
            bed.runtime.cpus(claimed) == cpus.format() and bed.runtime.cpus(shared) == pool.format()
        )
    )
    assert bed.plugin.registry.get(claimed).claims == (uid,)  # type: ignore[union-attr]

    adopted = {fields["container_id"]: fields for fields in lines.said(ADOPTED)}
    assert adopted[claimed]["claims"] == uid and adopted[claimed]["ran_on"] == "any (no cpuset)"
    assert adopted[shared]["container"] == "default/race/shared"
    await eventually(lambda: len(lines.said(SETTLED)) == 2, "both moves reported")
    settled = {fields["container_id"]: fields for fields in lines.said(SETTLED)}
    how = "update" if bed.plugin.unsolicited.enabled else "resynchronization"
    assert {f["by"] for f in settled.values()} == {how}
    assert all(f["window_s"] >= 0 for f in settled.values())
    assert metric(bed, "dra_cpu_nri_adopted_containers_total") == 2
    assert not bed.plugin.adoptions.pending


@pytest.mark.parametrize("profile", [pytest.param(CRIO_1_34, id="cri-o-1.34")])
async def test_registering_again_keeps_the_plugin_ready_and_is_not_a_lost_connection(
    bed: Bed, lines: LogLines
) -> None:
    uid, cpus = await prepare_seen(bed, 1)
    pod = bed.runtime.add_pod("again")
    claimed = await bed.runtime.create_container(pod, "claimed", claim_env((uid, cpus)))
    disconnects = metric(bed, "dra_cpu_nri_runtime_disconnects_total")
    connects, synchronized_at = bed.stub.status.connects, bed.stub.status.synchronized_at
    seen: list[bool] = []

    async def sample() -> None:
        while True:
            seen.append(bed.stub.ready)
            await asyncio.sleep(0.001)

    sampler = asyncio.create_task(sample())
    try:
        assert bed.stub.resynchronize("a test asks")
        await eventually(
            lambda: (
                bed.stub.status.connects == connects + 1
                and bed.stub.status.synchronized_at > synchronized_at
            ),
            "registered and synchronized again",
        )
    finally:
        sampler.cancel()
    assert seen and all(seen), "readiness held through the new registration"
    assert lines.said(RESYNCING) and not lines.said(LOST)
    assert metric(bed, "dra_cpu_nri_runtime_disconnects_total") == disconnects
    assert bed.runtime.cpus(claimed) == cpus.format()
    assert bed.plugin.registry.get(claimed) is not None


@BOTH
async def test_an_adopted_container_that_stops_before_its_move_is_forgotten(
    bed: Bed, lines: LogLines, profile: RuntimeProfile
) -> None:
    uid, cpus = await prepare_seen(bed, 1)
    pod = bed.runtime.add_pod("brief")
    bed.plugin.set_pusher(None)
    bed.plugin.set_resynchronizer(None)  # nothing moves it: it stays pending
    (claimed,) = await created_while_registering(bed, pod, {"brief": claim_env((uid, cpus))})
    await eventually(lambda: claimed in bed.plugin.adoptions.pending, "adopted")
    await bed.runtime.stop_container(claimed)
    await bed.runtime.remove_container(claimed)
    assert claimed not in bed.plugin.adoptions.pending
    assert bed.plugin.registry.get(claimed) is None
    assert not lines.said(SETTLED)


@pytest.mark.parametrize("profile", [pytest.param(CRIO_1_34, id="cri-o-1.34")])
async def test_a_container_with_a_malformed_claim_env_is_left_alone_at_its_start(
    bed: Bed, lines: LogLines
) -> None:
    pod = bed.runtime.add_pod("garbled")
    (garbled,) = await created_while_registering(
        bed, pod, {"garbled": ["DRA_CPUSET_not-a-uid=0-1,x"]}
    )
    await eventually(
        lambda: any(
            r.getMessage() == "container with malformed DRA env left alone" for r in lines.records
        ),
        "the refusal logged",
    )
    assert bed.plugin.registry.get(garbled) is None
    assert not lines.said(ADOPTED)


@pytest.mark.parametrize("profile", [pytest.param(RuntimeProfile(), id="containerd-2.4")])
async def test_an_update_the_runtime_does_not_take_falls_back_to_registering_again(
    bed: Bed, lines: LogLines
) -> None:
    async def refused(updates: Sequence[api_pb2.ContainerUpdate], timeout: float) -> list[Any]:
        raise TtrpcError(14, "connection reset")

    bed.plugin.adoptions.set_pusher(refused)
    uid, cpus = await prepare_seen(bed, 1)
    pod = bed.runtime.add_pod("fallback")
    (claimed,) = await created_while_registering(bed, pod, {"claimed": claim_env((uid, cpus))})
    await bed.runtime.wait_for(lambda: bed.runtime.cpus(claimed) == cpus.format())
    await eventually(lambda: lines.said(SETTLED), "the move reported")
    [settled] = lines.said(SETTLED)
    assert settled["by"] == "resynchronization" and settled["container_id"] == claimed


async def test_without_a_registered_connection_there_is_nothing_to_register_again(
    bed: Bed,
) -> None:
    bed.stub.stop()
    await eventually(lambda: not bed.stub.status.connected, "the connection closed")
    assert bed.stub.resynchronize("nothing to close") is False


@BOTH
async def test_a_container_stopping_during_a_synchronize_does_not_cost_the_registration(
    bed: Bed, profile: RuntimeProfile
) -> None:
    """Registering again synchronizes often: an update the runtime cannot apply to a container
    it is stopping must not make it drop the plugin."""
    uid, cpus = await prepare_seen(bed, 1)
    pod = bed.runtime.add_pod("leaving")
    leaving = await bed.runtime.create_container(pod, "leaving")
    claimed = await bed.runtime.create_container(pod, "claimed", claim_env((uid, cpus)))
    bed.runtime.stopping.add(leaving)
    rejected = len(bed.runtime.rejections)
    connects = bed.stub.status.connects
    await bed.runtime.restart()
    await eventually(
        lambda: bed.stub.status.connects > connects and bed.stub.ready,
        "the plugin registered and synchronized again",
    )
    await bed.runtime.wait_plugin()
    assert bed.runtime.rejections[rejected:] == []
    assert bed.stub.status.connects == connects + 1
    assert bed.runtime.cpus(claimed) == cpus.format()
