"""The topology service's inventory read again, applied to the live state: the devices rebuilt
(claims keep their CPUs, those gone offline said loudly), and, while it cannot be read, every
device's health Unknown."""

from __future__ import annotations

from dracpu.allocator import claims
from dracpu.allocator.domain.devices import build_devices
from dracpu.allocator.live.state import LiveState
from dracpu.allocator.store import records
from dracpu.core.log import get_logger
from dracpu.core.machine import Machine
from dracpu.core.memory import memory_fingerprint
from dracpu.core.tasks import io

log = get_logger(__name__)


async def topology_unreadable(live: LiveState, error: str) -> None:
    """A topology refresh failed: devices are Unknown until one succeeds."""
    async with live.lock:
        if error != live.topology_error:
            live.topology_error = error
            live.assess_health(live.state)


def _same(new: Machine, old: Machine) -> bool:
    """Nothing the devices are built from changed: the CPUs, nor a NUMA node's memory."""
    same_memory = memory_fingerprint(new.memory) == memory_fingerprint(old.memory)
    return new.fingerprint == old.fingerprint and same_memory


async def update_topology(live: LiveState, machine: Machine) -> bool:
    """A new inventory: rebuild the devices; True if they changed."""
    async with live.lock:
        state = live.state
        if live.topology_error:
            live.topology_error = ""
            log.info(0, "topology readable again")
            if _same(machine, state.machine):
                live.assess_health(state)
        if _same(machine, state.machine):
            return False
        devices = build_devices(machine, live.options)
        before = live.devices.generation
        new_state = claims.retopologize(state, machine, devices)
        live.devices.of(new_state)  # moves the generation if they changed
        changed = live.devices.generation != before
        for record, offline in claims.offline_claims(new_state):
            log.warning(
                "claim holds CPUs that went offline; keeping the record",
                claim=record.uid,
                offline=offline.format(),
            )
        await io(records.write_node, live.state_dir, live.node_file(new_state))
        live.publish(new_state)
        live.assess_health(new_state)
        log.info(
            0,
            "topology changed",
            online=machine.online.format(),
            devices_changed=changed,
            devices_generation=live.devices.generation,
        )
        return changed
