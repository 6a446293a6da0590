"""The node's allocation state (`NodeState`) and what is read from it.

`NodeState` is immutable: every operation returns a new state, so a mutation can be reserved
in memory, made durable, and only then published (or simply dropped on failure), while readers
keep a consistent snapshot. The exclusive CPUs are the union of all prepared claims; the
shared pool is online - reserved - exclusive (strict reservation: a prepared claim's CPUs leave
the shared pool at prepare time, not when its container starts).

Two rules keep the published devices honest (`withheld`):
- the shared-pool floor: the lowest `min_shared` CPUs of the pool are never published nor
  handed out, so shared containers (the driver's own among them) always have somewhere to run;
- claims the scheduler cannot see on the current devices (prepared under another device mode,
  grouping or reserved set, or rebuilt from a spec or a running container) keep their CPUs
  out of what is published, so no CPU is offered while a claim holds it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property

from dracpu.allocator.claims.model import ClaimRecord
from dracpu.allocator.domain.devices import DeviceModel
from dracpu.core.cpuset import CPUSet
from dracpu.core.machine import Machine


@dataclass(frozen=True)
class NodeState:
    machine: Machine
    devices: DeviceModel
    records: Mapping[str, ClaimRecord] = field(default_factory=dict)
    # Unprepared while their container still runs: out of the records and their files, but
    # their CPUs stay exclusive until that container stops (memory only).
    draining: Mapping[str, ClaimRecord] = field(default_factory=dict)
    # Claims a running container presented that the allocator has no record of: held aside,
    # taking no CPUs, until a prepare of the claim confirms them (memory only).
    quarantined: Mapping[str, ClaimRecord] = field(default_factory=dict)
    pool_generation: int = 1
    claims_generation: int = 1
    # The union of the records' CPUs when the rule that made this state already knows it
    # (records never share a CPU: prepare adds a claim's CPUs, unprepare takes them away), so
    # a mutation costs the same however many claims the node holds.
    known_exclusive: CPUSet | None = field(default=None, compare=False, repr=False)
    # Likewise the CPUs of claims the devices do not account for, when the rule knows them.
    known_unaccounted: CPUSet | None = field(default=None, compare=False, repr=False)

    @property
    def reserved(self) -> CPUSet:
        return self.devices.options.reserved

    @property
    def online(self) -> CPUSet:
        return self.machine.online

    @cached_property
    def exclusive(self) -> CPUSet:
        if self.known_exclusive is not None:
            return self.known_exclusive
        mask = 0
        for record in self.records.values():
            mask |= record.cpus.mask
        for record in self.draining.values():
            mask |= record.cpus.mask
        return CPUSet.from_mask(mask)

    @cached_property
    def free(self) -> CPUSet:
        """CPUs a new claim may take."""
        return self.online - self.reserved - self.exclusive

    @cached_property
    def shared(self) -> CPUSet:
        """Where containers without a claim run: the free CPUs that are not isolated, or all
        free CPUs when every one of them is isolated (a container must run somewhere)."""
        free = self.free
        return (free - self.machine.isolated) or free

    @property
    def shared_on_isolated(self) -> bool:
        return bool(self.shared & self.machine.isolated)

    @property
    def min_shared(self) -> int:
        return self.devices.options.min_shared

    @cached_property
    def floor(self) -> CPUSet:
        """The CPUs kept for the shared pool: its first `min_shared` in device-number order,
        whole cores first and low-numbered ones first, like the kubelet's reserved CPUs (fewer
        only when the pool itself is smaller)."""
        wanted = self.min_shared
        if wanted <= 0:
            return CPUSet()
        shared = self.shared
        kept: list[int] = []
        for cpu in self.devices.order:
            if cpu in shared:
                kept.append(cpu)
                if len(kept) == wanted:
                    break
        return CPUSet(kept)

    @cached_property
    def unaccounted(self) -> CPUSet:
        """CPUs of claims whose allocation results do not name a current device holding them:
        the scheduler would see those CPUs as free."""
        if self.known_unaccounted is not None:
            return self.known_unaccounted
        mask = 0
        for record in self.records.values():
            if not accounted(record, self.devices, self.online):
                mask |= record.cpus.mask
        return CPUSet.from_mask(mask)

    @cached_property
    def withheld(self) -> CPUSet:
        """CPUs left out of the published devices: the floor, claims the devices do not account
        for, and unprepared claims whose container still runs on their CPUs."""
        draining = CPUSet()
        for record in self.draining.values():
            draining = draining | record.cpus
        return self.floor | self.unaccounted | draining

    @cached_property
    def allocatable(self) -> CPUSet:
        """CPUs a new claim may receive: the free CPUs above the shared pool's floor."""
        return self.free - self.floor

    def owner_of(self, cpus: CPUSet) -> ClaimRecord | None:
        for record in (*self.records.values(), *self.draining.values()):
            if record.cpus & cpus:
                return record
        return None

    def with_records(
        self,
        records: Mapping[str, ClaimRecord],
        *,
        pool_changed: bool,
        exclusive: CPUSet | None = None,
        unaccounted: CPUSet | None = None,
    ) -> NodeState:
        """A state with other records. Without `exclusive`, a change that moves no CPU keeps
        this state's union; one that does has it computed again when first asked. Without
        `unaccounted`, it is computed again when first asked."""
        if exclusive is None and not pool_changed:
            exclusive = self.exclusive
        return replace(
            self,
            records=records,
            pool_generation=self.pool_generation + (1 if pool_changed else 0),
            claims_generation=self.claims_generation + 1,
            known_exclusive=exclusive,
            known_unaccounted=unaccounted,
        )

    def unaccounted_if_known(self) -> CPUSet | None:
        """`unaccounted` when already computed, without computing it."""
        known = self.__dict__.get("unaccounted")
        return known if isinstance(known, CPUSet) else self.known_unaccounted


def accounted(record: ClaimRecord, devices: DeviceModel, online: CPUSet | None = None) -> bool:
    """Whether the scheduler sees this claim's CPUs as allocated on `devices`: each result
    names a device of this model that holds the (still online) CPUs it received."""
    if record.recovered or not record.allocations:
        return False
    for allocation in record.allocations:
        device = devices.by_name.get(allocation.device)
        cpus = allocation.cpus & online if online is not None else allocation.cpus
        if device is None or not cpus.issubset(device.cpus):
            return False
        if (allocation.count == 0) != (device.kind == "cpu"):
            return False
    return True


def shortfall(state: NodeState) -> int:
    """How many CPUs the shared pool lacks to reach its minimum (0 when it has enough)."""
    return max(0, state.min_shared - len(state.shared))


def retopologize(state: NodeState, machine: Machine, devices: DeviceModel) -> NodeState:
    """The inventory or configuration changed: records keep their CPUs (a claim is never
    silently dropped); the shared pool follows the new online set."""
    pool_changed = (
        machine.online != state.online
        or devices.options.reserved != state.reserved
        or machine.isolated != state.machine.isolated
    )
    return replace(
        state,
        machine=machine,
        devices=devices,
        pool_generation=state.pool_generation + (1 if pool_changed else 0),
        known_unaccounted=None,
    )


@dataclass(frozen=True, slots=True)
class Summary:
    allocated: int
    # What a new claim can get: the published devices' unclaimed CPUs (`allocatable`, so the
    # shared pool's floor is not counted).
    available: int
    reserved: int
    active_claims: int
    online: int


def summary(state: NodeState) -> Summary:
    return Summary(
        allocated=len(state.exclusive),
        available=len(state.allocatable),
        reserved=len(state.reserved & state.online),
        active_claims=len(state.records),
        online=len(state.online),
    )


def list_claims(state: NodeState, namespace: str = "") -> list[ClaimRecord]:
    return sorted(
        (r for r in state.records.values() if not namespace or r.namespace == namespace),
        key=lambda r: (r.namespace, r.name, r.uid),
    )


def offline_claims(state: NodeState) -> Sequence[tuple[ClaimRecord, CPUSet]]:
    """Records holding CPUs the kernel no longer reports online."""
    return [(r, r.cpus - state.online) for r in state.records.values() if r.cpus - state.online]
