"""What the allocator does not answer while the plugin synchronizes with the runtime is asked
again once it answers (dracpu.nri_plugin.events.unanswered): a claimed container it did not
adopt is adopted then, or detached if it stopped meanwhile, and the reconcile it missed is made
with the containers running by then. Otherwise the allocator keeps a stopped container as
running, and a claim unprepared after it keeps its CPUs out of the shared pool for good.

Driven through the runtime stand-in over the real transport, with the real allocator stopped
(SIGSTOP: its calls time out, as a busy or hung allocator's do) while the plugin registers."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from harness.nri_bed import ONLINE, Bed, claim_env, prepare_seen
from harness.waits import eventually

from dracpu.core.cpuset import CPUSet
from dracpu.dev.runtime_sim import RuntimeProfile

# Synchronize waits for one allocator deadline and the shared pool's fallback: the runtime is
# given longer than that before it drops the plugin.
PATIENT = RuntimeProfile(request_timeout=10.0, registration_timeout=15.0)


@pytest.fixture
def profile() -> RuntimeProfile:
    return PATIENT


@contextmanager
def allocator_silent(bed: Bed) -> Iterator[None]:
    """The allocator process stopped: it holds its socket and answers nothing."""
    pid = bed.allocator.process.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


async def synchronize_again(bed: Bed) -> None:
    """The runtime restarted: the plugin registers and synchronizes again."""
    connects = bed.stub.status.connects
    await bed.runtime.stop()
    await bed.runtime.start()
    await eventually(
        lambda: bed.stub.status.connects > connects and bed.stub.ready,
        "the plugin registered and synchronized again",
        timeout=30,
    )


async def claimed_container(bed: Bed, pod: str) -> tuple[str, str, CPUSet]:
    uid, cpus = await prepare_seen(bed, 2)
    container = await bed.runtime.create_container(pod, "work", claim_env((uid, cpus)))
    assert bed.runtime.cpus(container) == cpus.format()
    return uid, container, cpus


async def pool_gets_back(bed: Bed, cpus: CPUSet) -> None:
    async def back() -> bool:
        return cpus.issubset(await bed.allocator.shared())

    await eventually(back, f"the shared pool to hold {cpus} again", timeout=30)
    assert await bed.allocator.shared() == ONLINE


async def test_a_container_the_allocator_did_not_adopt_is_adopted_once_it_answers(
    bed: Bed,
) -> None:
    pod = bed.runtime.add_pod("app")
    uid, container, cpus = await claimed_container(bed, pod)
    with allocator_silent(bed):
        await synchronize_again(bed)
        assert bed.plugin.unanswered.adopts == [container]
        assert bed.plugin.registry.get(container) is None
    await eventually(
        lambda: not bed.plugin.unanswered.adopts and not bed.plugin.unanswered.reconcile_owed,
        "the adopt and the reconcile answered",
        timeout=30,
    )
    record = bed.plugin.registry.get(container)
    assert record is not None and record.claims == (uid,)
    held = await bed.allocator.claim(uid)
    assert held.owner.container_id == container and held.owner_running
    # Its stop reaches the allocator as any known container's does.
    await bed.runtime.stop_container(container)
    await bed.allocator.unprepare(uid)
    await pool_gets_back(bed, cpus)


async def test_a_container_that_stops_before_its_adoption_is_detached(bed: Bed) -> None:
    pod = bed.runtime.add_pod("brief")
    uid, container, cpus = await claimed_container(bed, pod)
    with allocator_silent(bed):
        await synchronize_again(bed)
        assert bed.plugin.unanswered.adopts == [container]
        await bed.runtime.stop_container(container)  # an event for a container not registered
        await bed.runtime.remove_container(container)
        assert bed.plugin.unanswered.adopts == []
    await bed.allocator.unprepare(uid)  # the kubelet, once the pod's containers stopped
    await pool_gets_back(bed, cpus)


async def test_a_container_that_stopped_while_the_plugin_was_away_is_reconciled_later(
    bed: Bed,
) -> None:
    pod = bed.runtime.add_pod("gone")
    uid, container, cpus = await claimed_container(bed, pod)
    await bed.runtime.stop()  # the plugin is away: nobody hears of the stop
    await bed.runtime.stop_container(container)
    await bed.runtime.remove_container(container)
    with allocator_silent(bed):
        await synchronize_again(bed)
        assert bed.plugin.unanswered.reconcile_owed
    await eventually(
        lambda: not bed.plugin.unanswered.reconcile_owed, "the reconcile answered", timeout=30
    )
    await bed.allocator.unprepare(uid)
    await pool_gets_back(bed, cpus)
