"""Invariants of the claim rules over random machines and random operation sequences:
claims never share a CPU, the shared pool is always online - reserved - exclusive, every
result is drawn from the device's free CPUs with the requested size, and repeats are
idempotent."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
)

from dracpu.allocator import claims
from dracpu.allocator.claims import Container, NodeState, Owner, PrepareInput, ResultInput
from dracpu.allocator.domain.devices import DeviceOptions, build_devices
from dracpu.core.cpuset import CPUSet
from dracpu.core.errors import ConflictError, DracpuError, InsufficientCPUsError
from dracpu.core.machine import CPUInfo, Machine


@st.composite
def machines(draw: Any) -> Machine:
    sockets = draw(st.integers(1, 2))
    nodes_per_socket = draw(st.integers(1, 2))
    cores_per_node = draw(st.integers(1, 5))
    threads = draw(st.sampled_from([1, 2, 4]))
    split = draw(st.booleans())  # siblings n / n+N, or adjacent
    cores = sockets * nodes_per_socket * cores_per_node
    cpus = []
    for core in range(cores):
        socket = core // (nodes_per_socket * cores_per_node)
        node = core // cores_per_node
        for thread in range(threads):
            cpu_id = thread * cores + core if split else core * threads + thread
            cpus.append(
                CPUInfo(
                    cpu_id=cpu_id,
                    # sysfs core ids restart in every socket
                    core_id=core % (nodes_per_socket * cores_per_node),
                    socket_id=socket,
                    numa_node_id=node,
                    uncore_cache_id=socket,
                )
            )
    return Machine.build(cpus)


def _counts(size: int) -> st.SearchStrategy[int]:
    # Mostly small requests, so the node fills up gradually; sometimes the whole device.
    return st.one_of(st.integers(1, min(4, max(1, size))), st.integers(1, max(1, size)))


class ClaimSequences(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.state: NodeState | None = None
        self.requests: dict[str, PrepareInput] = {}
        self.clock = 0

    @rule(
        machine=machines(),
        mode=st.sampled_from(["numanode", "socket", "individual"]),
        reserved_seed=st.integers(0, 2**16),
    )
    @precondition(lambda self: self.state is None)
    def setup(self, machine: Machine, mode: str, reserved_seed: int) -> None:
        ids = machine.cpu_set.sorted()
        reserved = CPUSet(
            c for i, c in enumerate(ids) if reserved_seed >> (i % 16) & 1 and i % 3 == 0
        )
        options = (
            DeviceOptions(mode="individual", reserved=reserved)
            if mode == "individual"
            else DeviceOptions(group_by=mode, reserved=reserved)  # type: ignore[arg-type]
        )
        self.state = NodeState(machine=machine, devices=build_devices(machine, options))

    def _results(self, data: st.DataObject) -> tuple[ResultInput, ...]:
        assert self.state is not None
        devices = self.state.devices.devices
        chosen = data.draw(st.lists(st.sampled_from(devices), min_size=1, max_size=3))
        if self.state.devices.mode == "individual":
            return tuple(ResultInput(request=f"r{i}", device=d.name) for i, d in enumerate(chosen))
        return tuple(
            ResultInput(
                request=f"r{i}",
                device=d.name,
                consumed={"dra.cpu/cpu": str(data.draw(_counts(len(d.cpus))))},
            )
            for i, d in enumerate(chosen)
        )

    @precondition(lambda self: self.state is not None and self.state.devices.devices)
    @rule(uid=st.sampled_from(["a", "b", "c", "d", "e", "f"]), data=st.data())
    def prepare(self, uid: str, data: st.DataObject) -> None:
        assert self.state is not None
        request = PrepareInput(uid=uid, namespace="ns", name=uid, results=self._results(data))
        before = self.state
        self.clock += 1
        try:
            outcome = claims.prepare(before, request, self.clock)
        except (InsufficientCPUsError, ConflictError) as exc:
            # Refusals are for real reasons only.
            if isinstance(exc, ConflictError):
                assert (
                    uid in before.records
                    or uid in before.draining
                    or before.devices.mode == "individual"
                )
            return
        except DracpuError as exc:
            # Individual mode may name a device twice; nothing else is malformed here.
            assert "appears twice" in str(exc), exc
            return
        record = outcome.record
        if outcome.already_prepared:
            assert record == before.records[uid]
            return
        assert uid not in before.records
        assert record.cpus.issubset(before.shared)
        for allocation, result in zip(record.allocations, request.results, strict=True):
            device = before.devices.by_name[result.device]
            assert allocation.cpus.issubset(device.cpus)
            if before.devices.mode == "grouped":
                assert len(allocation.cpus) == int(result.consumed["dra.cpu/cpu"])
        sizes = sum(len(a.cpus) for a in record.allocations)
        assert sizes == len(record.cpus), "results of one claim overlap"
        self.requests[uid] = request
        self.state = outcome.state

    @precondition(lambda self: bool(self.requests))
    @rule(data=st.data())
    def prepare_again(self, data: st.DataObject) -> None:
        assert self.state is not None
        uid = data.draw(st.sampled_from(sorted(self.requests)))
        outcome = claims.prepare(self.state, self.requests[uid], self.clock)
        assert outcome.already_prepared and outcome.state is self.state

    @precondition(lambda self: self.state is not None)
    @rule(uid=st.sampled_from(["a", "b", "c", "d", "e", "f", "never"]))
    def unprepare(self, uid: str) -> None:
        assert self.state is not None
        new_state, record = claims.unprepare(self.state, uid)
        assert (record is not None) == (uid in self.requests)
        if record is not None:
            if record.container_id:  # still running: its CPUs stay out until it stops
                assert new_state.shared == self.state.shared
                assert new_state.draining[uid] == record
            else:
                assert new_state.shared == self.state.shared | record.cpus
            del self.requests[uid]
        self.state = new_state

    @precondition(lambda self: bool(self.requests))
    @rule(data=st.data(), pod=st.sampled_from(["p1", "p2"]), name=st.sampled_from(["x", "y"]))
    def attach(self, data: st.DataObject, pod: str, name: str) -> None:
        assert self.state is not None
        uid = data.draw(st.sampled_from(sorted(self.requests)))
        record = self.state.records[uid]
        owner = Owner(pod, name)
        try:
            outcome = claims.attach(
                self.state, Container(f"{pod}-{name}", owner), {uid: record.cpus}
            )
        except ConflictError:
            assert record.owner is not None and record.owner != owner
            return
        assert outcome.state.records[uid].owner == owner
        assert outcome.state.shared == self.state.shared
        self.state = outcome.state

    @precondition(lambda self: self.state is not None)
    @rule(pod=st.sampled_from(["p1", "p2"]), name=st.sampled_from(["x", "y"]))
    def detach(self, pod: str, name: str) -> None:
        assert self.state is not None
        before = self.state
        released = CPUSet()
        for record in before.draining.values():
            if record.container_id == f"{pod}-{name}":
                released = released | record.cpus
        new_state, _ = claims.detach(before, f"{pod}-{name}")
        assert new_state.shared == before.shared | released
        self.state = new_state

    @invariant()
    def claims_are_disjoint_and_the_pool_adds_up(self) -> None:
        if self.state is None:
            return
        state = self.state
        seen = CPUSet()
        for record in (*state.records.values(), *state.draining.values()):
            assert record.cpus.isdisjoint(seen)
            assert record.cpus.isdisjoint(state.reserved)
            seen = seen | record.cpus
        assert state.exclusive == seen
        assert state.shared == state.online - state.reserved - seen
        assert set(state.records) == set(self.requests)


TestClaimSequences = ClaimSequences.TestCase
TestClaimSequences.settings = settings(
    max_examples=100,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
