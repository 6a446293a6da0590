"""Random prepare / unprepare / attach sequences on the live allocator with real files,
restarted at random points: a restart always comes back to exactly the state it left, and the
CDI specs and the claim record files on disk always match the published state, and the
incrementally kept union of claimed CPUs always equals the one computed from the records."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from dracpu.allocator.claims import Container, Owner, PrepareInput, ResultInput
from dracpu.allocator.domain.devices import DeviceOptions
from dracpu.allocator.live.node import NodeAllocator
from dracpu.allocator.store import cdi, records
from dracpu.core.cpuset import CPUSet
from dracpu.core.errors import ConflictError, InsufficientCPUsError, StateError
from dracpu.core.machine import CPUInfo, Machine

# 2 sockets x 4 cores x 2 threads, siblings n / n+8, one NUMA node per socket.
MACHINE = Machine.build(
    CPUInfo(cpu_id=t * 8 + c, core_id=c % 4, socket_id=c // 4, numa_node_id=c // 4)
    for c in range(8)
    for t in range(2)
)
OPTIONS = DeviceOptions(reserved=CPUSet([0]))
UIDS = st.sampled_from(["a", "b", "c", "d"])


def request(uid: str, device: str, count: int) -> PrepareInput:
    result = ResultInput(request="r", device=device, pool="n", consumed={"dra.cpu/cpu": str(count)})
    return PrepareInput(uid=uid, namespace="ns", name=uid, results=(result,))


def snapshot(node: NodeAllocator) -> dict[str, Any]:
    return {
        uid: (r.cpus, r.owner, r.allocations, r.namespace, r.name)
        for uid, r in node.state.records.items()
    }


class Restarts(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.base = Path(tempfile.mkdtemp(dir="/tmp", prefix="rs-"))
        self.loop = asyncio.new_event_loop()
        self.node = self._start()

    def _start(self) -> NodeAllocator:
        node = NodeAllocator(
            state_dir=self.base / "state", cdi_dir=self.base / "cdi", options=OPTIONS
        )
        self.loop.run_until_complete(node.start(MACHINE))
        return node

    def teardown(self) -> None:
        self.loop.close()
        shutil.rmtree(self.base, ignore_errors=True)

    @rule(
        uid=UIDS,
        device=st.sampled_from(["cpudevnuma000", "cpudevnuma001"]),
        count=st.integers(1, 5),
    )
    def prepare(self, uid: str, device: str, count: int) -> None:
        # A full device, or the same uid again with other results, is refused; fine here.
        with contextlib.suppress(InsufficientCPUsError, ConflictError):
            self.loop.run_until_complete(self.node.prepare(request(uid, device, count)))

    @rule(uid=UIDS)
    def unprepare(self, uid: str) -> None:
        self.loop.run_until_complete(self.node.unprepare(uid))

    @rule(uid=UIDS, pod=st.sampled_from(["p", "q"]))
    def attach(self, uid: str, pod: str) -> None:
        record = self.node.state.records.get(uid)
        if record is None:
            return
        try:
            self.loop.run_until_complete(
                self.node.attach(Container(f"{pod}-1", Owner(pod, "main")), {uid: record.cpus})
            )
        except ConflictError:
            assert record.owner is not None and record.owner.pod_uid != pod

    @rule()
    def restart(self) -> None:
        before = snapshot(self.node)
        self.node = self._start()
        assert snapshot(self.node) == before

    @invariant()
    def disk_matches_the_published_state(self) -> None:
        published = self.node.state.records
        specs = {}
        for spec in cdi.read_specs(self.base / "cdi"):
            assert not isinstance(spec, StateError)
            specs[spec.uid] = spec.cpus
        assert specs == {uid: r.cpus for uid, r in published.items()}
        loaded = records.load_records(self.base / "state")
        assert loaded is not None and loaded.bad == []
        assert loaded.records == dict(published)
        union = CPUSet()
        for record in (*published.values(), *self.node.state.draining.values()):
            union = union | record.cpus
        assert self.node.state.exclusive == union


TestRestarts = Restarts.TestCase
TestRestarts.settings = settings(
    max_examples=40,
    stateful_step_count=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
