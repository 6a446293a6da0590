"""Running containers on the live state: a container attached to its claims when it starts,
detached when it stops, those the runtime no longer runs detached at once, and the running
containers the nri-plugin reports during recovery adopted. Each holds the lock, and what it
changes is durable before it is published."""

from __future__ import annotations

from collections.abc import Mapping

from dracpu.allocator import claims
from dracpu.allocator.live.state import LiveState
from dracpu.core.cpuset import CPUSet
from dracpu.core.log import get_logger
from dracpu.core.tasks import io, run_to_end

log = get_logger(__name__)


async def attach(
    live: LiveState,
    container: claims.Container,
    presented: Mapping[str, CPUSet],
    enforces_memory: bool = False,
) -> claims.AttachOutcome:
    async with live.lock:
        state = live.state
        outcome = claims.attach(state, container, presented, enforces_memory)
        for uid in sorted(presented):
            before = state.records[uid]
            if before.owner is None and not before.pods_known:
                log.warning(
                    "claim prepared without its reservedFor pods (an older dra-plugin); "
                    "its first container becomes the owner",
                    claim=uid,
                    owner=container.owner.describe(),
                )
        if outcome.changed:
            await io(live.write_records, state, outcome.state, sorted(presented))
            live.publish(outcome.state)
        log.info(
            2,
            "container attached",
            container=container.container_id,
            owner=container.owner.describe(),
            claims=",".join(sorted(presented)),
            cpus=outcome.cpus.format(),
        )
        return outcome


async def detach(live: LiveState, container_id: str) -> list[str]:
    async with live.lock:
        state = live.state
        new_state, uids = claims.detach(state, container_id)
        if new_state is not state:
            await io(live.write_records, state, new_state, uids)
            live.publish(new_state)
        if uids:
            log.info(2, "container detached", container=container_id, claims=",".join(uids))
        return uids


async def reconcile(live: LiveState, running: set[str]) -> list[str]:
    """Detach every container held as running that the runtime no longer runs; returns
    their ids."""
    gone = sorted(claims.running_containers(live.state) - running)
    for container_id in gone:
        await run_to_end(detach(live, container_id))
    if gone:
        log.warning(
            "containers the runtime no longer runs were detached (their stop was missed)",
            containers=",".join(gone[:20]),
            count=len(gone),
        )
    return gone


async def adopt(
    live: LiveState, container: claims.Container, presented: Mapping[str, CPUSet]
) -> claims.AdoptOutcome:
    async with live.lock:
        state = live.state
        outcome = claims.adopt(state, container, presented, live.clock())
        if outcome.changed:
            await io(live.write_records, state, outcome.state, sorted(presented))
        if outcome.state is not state:
            live.publish(outcome.state)
        for result in outcome.results:
            if result.quarantined:
                log.warning(
                    "running container presents a claim this node has no record of; "
                    "quarantined, no CPUs taken",
                    claim=result.uid,
                    container=container.container_id,
                    owner=container.owner.describe(),
                )
            elif not result.accepted:
                log.warning(
                    "running container's claim refused", claim=result.uid, error=result.error
                )
        return outcome
