"""The containers the runtime runs, as the NRI plugin knows them. Pure data, no I/O."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace

from dracpu.core.containers import Container
from dracpu.core.cpuset import EMPTY, CPUSet


@dataclass(frozen=True, slots=True)
class ContainerRecord:
    container: Container
    claims: tuple[str, ...]  # claim UIDs; empty = shared container
    cpus: CPUSet  # the cpuset last handed to the runtime for it (EMPTY = none yet)
    state: str = "created"  # created, running, paused, stopped, unknown
    # False while an update of `cpus` has an unknown outcome (its answer never came): the
    # runtime may run the container on `cpus` or on what it had before. Such a container is
    # stale whatever the pool is, so the next push re-sends it.
    confirmed: bool = True
    # Claim UIDs its env names that the allocator holds in quarantine (no record of them on
    # this node): they do not make the container exclusive, it runs on the shared pool.
    quarantined: tuple[str, ...] = ()
    # The memory nodes (cpuset.mems) handed to the runtime with `cpus`: the claims' NUMA
    # nodes when they are placed; EMPTY leaves the container's memory nodes as they are.
    mems: CPUSet = EMPTY
    # A claimed container that runs on the shared pool too (`cpuConfig.sharedPool: include`):
    # its claims' CPUs, which it runs on with the pool; EMPTY for every other container.
    own: CPUSet = EMPTY
    # `cpus` changed between its creation and its start. The runtime may have taken that
    # update into the container's spec after its start had read the spec (containerd updates
    # only the spec of a container not yet running): the container can run on its creation's
    # cpuset whatever the answer said, so the move is sent again once it runs.
    moved_before_start: bool = False

    @property
    def container_id(self) -> str:
        return self.container.container_id

    @property
    def name(self) -> str:
        """namespace/pod/container, as the plugin's log lines name it."""
        c = self.container
        return f"{c.pod_namespace}/{c.pod_name}/{c.container_name}"

    @property
    def exclusive(self) -> bool:
        return bool(self.claims)

    @property
    def follows_pool(self) -> bool:
        """Whether its cpuset follows the shared pool: a shared container, or a claimed one
        with the pool included."""
        return not self.claims or bool(self.own)

    def target(self, pool: CPUSet | None) -> CPUSet:
        """The cpuset it is to run on with this shared pool (None: not known yet): its claims'
        CPUs, the pool, or both (EMPTY: a shared container while the pool is unknown)."""
        if not self.follows_pool:
            return self.cpus
        return self.own | (pool or EMPTY)


class Registry:
    """Container id -> record. Mutated only under the plugin's lock."""

    def __init__(self, records: Iterable[ContainerRecord] = ()) -> None:
        self._records: dict[str, ContainerRecord] = {}
        # Containers following the pool grouped by the pool part of their cpuset (all of it
        # for a shared one, what their own CPUs leave of it for a claimed one with the pool
        # included): finding the ones off the pool costs O(stale), not O(all), on every
        # CreateContainer. Unconfirmed ones sit under None, which no pool equals.
        self._shared_by_cpus: dict[CPUSet | None, set[str]] = {}
        # Claimed containers not following the pool whose cpuset the runtime has not confirmed
        # (an update of it failed, or its outcome is unknown): stale whatever the pool.
        self._unconfirmed_own: set[str] = set()
        for record in records:
            self.put(record)

    def __len__(self) -> int:
        return len(self._records)

    def __iter__(self) -> Iterator[ContainerRecord]:
        return iter(sorted(self._records.values(), key=_order))

    def get(self, container_id: str) -> ContainerRecord | None:
        return self._records.get(container_id)

    def put(self, record: ContainerRecord) -> None:
        self._unindex(self._records.get(record.container_id))
        self._records[record.container_id] = record
        if record.follows_pool:
            self._shared_by_cpus.setdefault(_key(record), set()).add(record.container_id)
        elif not record.confirmed:
            self._unconfirmed_own.add(record.container_id)

    def _unindex(self, record: ContainerRecord | None) -> None:
        if record is None:
            return
        if not record.follows_pool:
            self._unconfirmed_own.discard(record.container_id)
            return
        key = _key(record)
        ids = self._shared_by_cpus.get(key)
        if ids is not None:
            ids.discard(record.container_id)
            if not ids:
                del self._shared_by_cpus[key]

    def remove(self, container_id: str, pod_uid: str = "") -> ContainerRecord | None:
        """Forget a container; a pod UID that does not match leaves it (stale event)."""
        record = self._records.get(container_id)
        if record is None or (
            pod_uid and record.container.pod_uid and record.container.pod_uid != pod_uid
        ):
            return None
        self._unindex(record)
        return self._records.pop(container_id)

    def shared(self) -> list[ContainerRecord]:
        return [r for r in self._records.values() if not r.exclusive]

    def stale(self, pool: CPUSet, exclude: str = "") -> list[ContainerRecord]:
        """Containers that need an update to their `target(pool)`: those following the pool
        (`ContainerRecord.follows_pool`) not known to run on `pool`, and the claimed ones whose
        cpuset the runtime has not confirmed. With an empty pool, of those following it only
        the ones with CPUs of their own: a shared container cannot run on no CPU."""
        following = [
            self._records[cid]
            for cpus, ids in self._shared_by_cpus.items()
            if cpus != pool
            for cid in ids
            if cid != exclude
        ]
        own = [self._records[cid] for cid in sorted(self._unconfirmed_own) if cid != exclude]
        return (following if pool else [r for r in following if r.own]) + own

    def set_cpus(
        self,
        container_id: str,
        cpus: CPUSet,
        expected: ContainerRecord | None = None,
        *,
        confirmed: bool = True,
    ) -> bool:
        """Record a cpuset the runtime applied (`confirmed`) or may have applied; with
        `expected`, only if its cpuset is still that record's (nothing changed it meanwhile)."""
        record = self._records.get(container_id)
        if record is None:
            return False
        if expected is not None and (record.cpus, record.confirmed) != (
            expected.cpus,
            expected.confirmed,
        ):
            return False
        moved = record.moved_before_start or (record.state == "created" and cpus != record.cpus)
        self.put(replace(record, cpus=cpus, confirmed=confirmed, moved_before_start=moved))
        return True

    def set_state(self, container_id: str, state: str) -> bool:
        record = self._records.get(container_id)
        if record is None:
            return False
        self._records[container_id] = replace(record, state=state)
        return True


def _key(record: ContainerRecord) -> CPUSet | None:
    # The shared pool never holds a claimed CPU, so a container with the pool included is on
    # `pool` exactly when its cpuset less its own CPUs is `pool`.
    return record.cpus - record.own if record.confirmed else None


def _order(record: ContainerRecord) -> tuple[str, str, str, str]:
    c = record.container
    return (c.pod_namespace, c.pod_name, c.container_name, c.container_id)
