"""The live allocator on real files: durable before acknowledged, rolled back on failure,
recovered on start (claim records, CDI specs and topology cross-checked), migrated from the
single-file checkpoint of older builds."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from logformats import klog_lines

from dracpu.allocator.claims import (
    Allocation,
    ClaimRecord,
    Container,
    Owner,
    PrepareInput,
    ResultInput,
    summary,
)
from dracpu.allocator.domain.devices import DeviceOptions
from dracpu.allocator.live.node import NodeAllocator
from dracpu.allocator.store import cdi, checkpoint, records
from dracpu.core import log
from dracpu.core.cpuset import CPUSet
from dracpu.core.errors import StateError, UnavailableError
from dracpu.core.machine import Machine
from dracpu.core.metrics import exposition, service_registry

Machines = Callable[[str], Machine]
OPTIONS = DeviceOptions(reserved=CPUSet.parse("0,20"))


def request(uid: str, count: int = 2, device: str = "cpudevnuma000") -> PrepareInput:
    result = ResultInput(request="r", device=device, pool="n", consumed={"dra.cpu/cpu": str(count)})
    return PrepareInput(uid=uid, namespace="ns", name=uid, results=(result,))


def saved(base: Path) -> dict[str, ClaimRecord]:
    """The claim records on disk, all of which must be trusted."""
    loaded = records.load_records(base / "state")
    assert loaded is not None and loaded.bad == []
    return loaded.records


def node_in(base: Path, options: DeviceOptions = OPTIONS, **kw: object) -> NodeAllocator:
    return NodeAllocator(state_dir=base / "state", cdi_dir=base / "cdi", options=options, **kw)  # type: ignore[arg-type]


@pytest.fixture
def logs() -> Iterator[io.StringIO]:
    """The allocator's log lines, captured; logging is put back as it was afterwards."""
    root = logging.getLogger("dracpu")
    handlers, verbosity = list(root.handlers), log.verbosity()
    stream = io.StringIO()
    log.setup(2, "allocator-test", stream)
    yield stream
    log.setup(verbosity, "dracpu", io.StringIO())
    root.handlers[:] = handlers


async def test_unusable_directories_fail_the_start(tmp_path: Path, machines: Machines) -> None:
    (tmp_path / "cdi").write_text("not a directory")
    with pytest.raises(StateError, match="cannot create"):
        await node_in(tmp_path).start(machines("xeon-2s-ht"))


async def test_not_ready_until_started(tmp_path: Path, machines: Machines) -> None:
    node = node_in(tmp_path)
    with pytest.raises(UnavailableError):
        node.shared_pool()
    await node.start(machines("xeon-2s-ht"))
    assert node.shared_pool().cpus == CPUSet.parse("1-19,21-39")


async def test_prepare_is_durable_and_unprepare_removes_both(
    tmp_path: Path, machines: Machines
) -> None:
    node = node_in(tmp_path)
    await node.start(machines("xeon-2s-ht"))
    outcome = await node.prepare(request("u1"))
    spec = cdi.spec_path(tmp_path / "cdi", "u1")
    assert json.loads(spec.read_text())["devices"][0]["containerEdits"]["env"] == [
        f"DRA_CPUSET_u1={outcome.record.cpus.format()}"
    ]
    assert saved(tmp_path) == {"u1": outcome.record}
    released = await node.unprepare("u1")
    assert released is not None and released.cpus == outcome.record.cpus
    assert not spec.exists()
    assert saved(tmp_path) == {}
    assert await node.unprepare("u1") is None


async def test_restart_restores_claims_owners_and_generations(
    tmp_path: Path, machines: Machines
) -> None:
    machine = machines("xeon-2s-ht")
    node = node_in(tmp_path)
    await node.start(machine)
    first = await node.prepare(request("u1"))
    owner = Owner("pod", "app", "ns", "p")
    await node.attach(Container("cid", owner), {"u1": first.record.cpus})
    _, devices_generation = node.devices
    pool_generation = node.shared_pool().generation
    again = node_in(tmp_path)
    await again.start(machine)
    record = again.state.records["u1"]
    assert record.cpus == first.record.cpus and record.owner == owner and record.allocations
    assert again.devices[1] == devices_generation  # same devices, same generation
    assert again.shared_pool().generation > pool_generation
    changed = node_in(tmp_path, DeviceOptions(reserved=CPUSet.parse("0-1,20-21")))
    await changed.start(machine)
    assert changed.devices[1] == devices_generation + 1


async def test_failed_cdi_write_leaves_nothing(tmp_path: Path, machines: Machines) -> None:
    node = node_in(tmp_path)
    await node.start(machines("xeon-2s-ht"))
    before = node.state
    (tmp_path / "cdi").rmdir()
    (tmp_path / "cdi").write_text("not a directory")
    with pytest.raises(StateError, match="cannot write CDI spec"):
        await node.prepare(request("u1"))
    assert node.state is before and "u1" not in node.state.records
    assert saved(tmp_path) == {}  # the record written alongside the spec is removed again


async def test_failed_record_write_rolls_back_the_spec(tmp_path: Path, machines: Machines) -> None:
    node = node_in(tmp_path)
    await node.start(machines("xeon-2s-ht"))
    before = node.state
    state_dir = tmp_path / "state"
    shutil.rmtree(state_dir)
    state_dir.write_text("now a file")
    with pytest.raises(StateError, match="cannot write claim record"):
        await node.prepare(request("u1"))
    assert node.state is before
    assert not cdi.spec_path(tmp_path / "cdi", "u1").exists()


async def test_failed_record_removal_on_unprepare_keeps_the_claim_and_its_spec(
    tmp_path: Path, machines: Machines
) -> None:
    node = node_in(tmp_path)
    await node.start(machines("xeon-2s-ht"))
    await node.prepare(request("u1"))
    state_dir = tmp_path / "state"
    shutil.rmtree(state_dir)
    state_dir.write_text("now a file")
    with pytest.raises(StateError):
        await node.unprepare("u1")
    assert "u1" in node.state.records
    assert cdi.spec_path(tmp_path / "cdi", "u1").exists()


async def test_concurrent_unprepares_go_together_and_a_failed_one_keeps_only_its_claim(
    tmp_path: Path, machines: Machines, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = node_in(tmp_path)
    await node.start(machines("xeon-2s-ht"))
    uids = [f"u{i}" for i in range(6)]
    for uid in uids:
        await node.prepare(request(uid, count=1))
    kept = node.state.records["u3"].cpus
    remove = records.remove_record

    def failing(state_dir: Path, uid: str) -> bool:
        if uid == "u3":
            raise StateError("cannot remove claim record: disk says no")
        return remove(state_dir, uid)

    monkeypatch.setattr(records, "remove_record", failing)
    answers = await asyncio.gather(
        *(node.unprepare(uid) for uid in [*uids, "never-prepared", "u1"]),
        return_exceptions=True,
    )
    assert isinstance(answers[3], StateError)
    assert all(a is not None and not isinstance(a, BaseException) for a in answers[:3])
    assert answers[6] is None  # nothing was prepared under that UID
    assert answers[7] == answers[1]  # the same claim twice in one batch: one answer
    assert set(node.state.records) == {"u3"}
    assert node.state.records["u3"].cpus == kept and not kept & node.state.shared
    assert saved(tmp_path) == {"u3": node.state.records["u3"]}
    assert [p.name for p in (tmp_path / "cdi").glob("*.json")] == [
        cdi.spec_path(tmp_path / "cdi", "u3").name
    ]


async def test_rebuild_from_cdi_specs_when_nothing_is_saved(
    tmp_path: Path, machines: Machines, logs: io.StringIO
) -> None:
    cdi.write_spec(tmp_path / "cdi", "a", CPUSet.parse("3-4"))
    cdi.write_spec(tmp_path / "cdi", "b", CPUSet.parse("13"))
    node = node_in(tmp_path)
    await node.start(machines("xeon-2s-ht"))
    records = node.state.records
    assert {u: r.cpus.format() for u, r in records.items()} == {"a": "3-4", "b": "13"}
    assert all(r.recovered for r in records.values())
    assert "rebuilt claim records from CDI specs" in logs.getvalue()
    assert saved(tmp_path) == dict(records)


async def test_a_corrupt_record_is_moved_aside_and_its_claim_rebuilt(
    tmp_path: Path, machines: Machines, logs: io.StringIO
) -> None:
    machine = machines("xeon-2s-ht")
    node = node_in(tmp_path)
    await node.start(machine)
    prepared = await node.prepare(request("u1"))
    other = await node.prepare(request("u2"))
    path = records.record_path(tmp_path / "state", "u1")
    path.write_text(path.read_text().replace('"namespace": "ns"', '"namespace": "edited"'))
    again = node_in(tmp_path)
    await again.start(machine)
    assert again.state.records["u1"].cpus == prepared.record.cpus
    assert again.state.records["u1"].recovered
    assert again.state.records["u2"] == other.record  # the others are untouched
    moved = list(records.claims_dir(tmp_path / "state").glob("u1.json.corrupt-*"))
    assert len(moved) == 1
    text = logs.getvalue()
    assert any(
        line.severity == "E" and "claim record cannot be trusted" in line.msg
        for line in klog_lines(text)
    )
    assert "claim rebuilt from its CDI spec" in text
    assert saved(tmp_path)["u1"] == again.state.records["u1"]  # rewritten, trusted again


async def test_a_missing_record_is_rebuilt_from_its_cdi_spec_loudly(
    tmp_path: Path, machines: Machines, logs: io.StringIO
) -> None:
    machine = machines("xeon-2s-ht")
    node = node_in(tmp_path)
    await node.start(machine)
    prepared = await node.prepare(request("u1"))
    records.record_path(tmp_path / "state", "u1").unlink()
    again = node_in(tmp_path)
    await again.start(machine)
    record = again.state.records["u1"]
    assert record.cpus == prepared.record.cpus and record.recovered
    warnings = [line.msg for line in klog_lines(logs.getvalue()) if line.severity == "W"]
    assert any("claim rebuilt from its CDI spec" in msg for msg in warnings)
    assert saved(tmp_path) == {"u1": record}
    # The kubelet prepares it again: the allocation results come back, same CPUs.
    completed = await again.prepare(request("u1"))
    assert completed.already_prepared and completed.record.cpus == prepared.record.cpus
    assert not completed.record.recovered and saved(tmp_path)["u1"] == completed.record


async def test_leftover_temp_files_are_removed_at_start(tmp_path: Path, machines: Machines) -> None:
    machine = machines("xeon-2s-ht")
    node = node_in(tmp_path)
    await node.start(machine)
    await node.prepare(request("u1"))
    state = tmp_path / "state"
    leftovers = [
        records.claims_dir(state) / ".u2.json.k3j4h5.tmp",
        state / ".node.json.a1b2c3.tmp",
        state / ".generations.d4e5f6.tmp",
        tmp_path / "cdi" / f".{cdi.FILE_PREFIX}u2.json.x9y8z7.tmp",
    ]
    for path in leftovers:
        path.write_text("{half a wr")
    again = node_in(tmp_path)
    await again.start(machine)
    assert [p for p in leftovers if p.exists()] == []
    assert list(again.state.records) == ["u1"] and list(saved(tmp_path)) == ["u1"]


def legacy_record(uid: str, cpus: str) -> ClaimRecord:
    return ClaimRecord(
        uid=uid,
        namespace="ns",
        name=uid,
        cpus=CPUSet.parse(cpus),
        allocations=(Allocation("r", "n", "cpudevnuma000", CPUSet.parse(cpus), 2, "packed"),),
        prepared_at_ns=5,
        owner=Owner("pod", "app", "ns", "p"),
    )


async def test_the_single_file_checkpoint_is_migrated_to_record_files(
    tmp_path: Path, machines: Machines, logs: io.StringIO
) -> None:
    machine = machines("xeon-2s-ht")
    old = (legacy_record("u1", "1-2"), legacy_record("u2", "3-4"))
    for record in old:
        cdi.write_spec(tmp_path / "cdi", record.uid, record.cpus)
    legacy = checkpoint.path_in(tmp_path / "state")
    legacy.parent.mkdir()
    legacy.write_bytes(
        checkpoint.encode(
            checkpoint.Checkpoint(records=old, pool_generation=40, claims_generation=50)
        )
    )
    node = node_in(tmp_path)
    await node.start(machine)
    assert dict(node.state.records) == {r.uid: r for r in old}
    assert saved(tmp_path) == {r.uid: r for r in old}
    assert not legacy.exists() and list((tmp_path / "state").glob("allocator-checkpoint*")) == []
    assert node.shared_pool().generation == 41 and node.state.claims_generation == 51
    assert "migrated the single-file checkpoint" in logs.getvalue()
    # Nothing left to migrate: the next start reads the record files alone.
    again = node_in(tmp_path)
    await again.start(machine)
    assert dict(again.state.records) == {r.uid: r for r in old}


async def test_a_migration_cut_short_is_finished_on_the_next_start(
    tmp_path: Path, machines: Machines
) -> None:
    old = (legacy_record("u1", "1-2"), legacy_record("u2", "3-4"))
    state = tmp_path / "state"
    state.mkdir()
    checkpoint.path_in(state).write_bytes(checkpoint.encode(checkpoint.Checkpoint(records=old)))
    records.write_record(state, old[0])  # killed after the first record file
    node = node_in(tmp_path)
    await node.start(machines("xeon-2s-ht"))
    assert saved(tmp_path) == {r.uid: r for r in old}
    assert not checkpoint.path_in(state).exists()


async def test_a_corrupt_legacy_checkpoint_is_moved_aside_and_claims_rebuilt(
    tmp_path: Path, machines: Machines, logs: io.StringIO
) -> None:
    cdi.write_spec(tmp_path / "cdi", "u1", CPUSet.parse("3-4"))
    legacy = checkpoint.path_in(tmp_path / "state")
    legacy.parent.mkdir()
    legacy.write_text('{"formatVersion": 1, "checksum": "sha256:00", "state": {}}')
    node = node_in(tmp_path)
    await node.start(machines("xeon-2s-ht"))
    assert node.state.records["u1"].cpus == CPUSet.parse("3-4")
    assert len(list((tmp_path / "state").glob("allocator-checkpoint.json.corrupt-*"))) == 1
    errors = [line for line in klog_lines(logs.getvalue()) if line.severity == "E"]
    assert any("moved aside" in f"{line.msg} {line.values}" for line in errors)


async def test_records_sharing_a_cpu_keep_the_first_prepared(
    tmp_path: Path, machines: Machines, logs: io.StringIO
) -> None:
    first = legacy_record("late-name", "1-2")
    second = ClaimRecord(
        uid="early-name", namespace="ns", name="x", cpus=CPUSet.parse("2-3"),
        allocations=(), prepared_at_ns=9,
    )  # fmt: skip
    for record in (first, second):
        records.write_record(tmp_path / "state", record)
        cdi.write_spec(tmp_path / "cdi", record.uid, record.cpus)
    node = node_in(tmp_path)
    await node.start(machines("xeon-2s-ht"))
    assert list(node.state.records) == ["late-name"]
    assert node.state.exclusive == CPUSet.parse("1-2")
    assert len(list(records.claims_dir(tmp_path / "state").glob("early-name.json.corrupt-*"))) == 1
    assert "shares CPUs with an earlier claim" in logs.getvalue()


async def test_generations_never_go_back_across_a_restart(
    tmp_path: Path, machines: Machines
) -> None:
    machine = machines("xeon-2s-ht")
    node = node_in(tmp_path)
    await node.start(machine)
    for uid in ("u1", "u2", "u3"):
        await node.prepare(request(uid))
        await node.unprepare(uid)  # leaves no record behind to remember it by
    seen = node.shared_pool().generation, node.state.claims_generation
    again = node_in(tmp_path)
    await again.start(machine)
    assert again.shared_pool().generation > seen[0]
    assert again.state.claims_generation > seen[1]


async def test_cross_check_of_checkpoint_and_specs(
    tmp_path: Path, machines: Machines, logs: io.StringIO
) -> None:
    machine = machines("xeon-2s-ht")
    node = node_in(tmp_path)
    await node.start(machine)
    kept = await node.prepare(request("kept"))
    lost = await node.prepare(request("lost-spec"))
    cdi.remove_spec(tmp_path / "cdi", "lost-spec")  # e.g. /var/run wiped
    cdi.write_spec(tmp_path / "cdi", "kept", CPUSet.parse("30"))  # edited behind our back
    cdi.write_spec(tmp_path / "cdi", "orphan", CPUSet.parse("35-36"))  # prepare cut short
    cdi.write_spec(tmp_path / "cdi", "clash", kept.record.cpus)  # collides with a record
    again = node_in(tmp_path)
    await again.start(machine)
    records = again.state.records
    assert records["kept"].cpus == kept.record.cpus
    assert records["lost-spec"].cpus == lost.record.cpus
    assert records["orphan"].cpus == CPUSet.parse("35-36") and records["orphan"].recovered
    assert "clash" not in records
    specs = {
        s.uid: s.cpus for s in cdi.read_specs(tmp_path / "cdi") if not isinstance(s, StateError)
    }
    assert specs["kept"] == kept.record.cpus and specs["lost-spec"] == lost.record.cpus
    text = logs.getvalue()
    for message in ("CDI spec missing", "CDI spec disagrees", "collides with recorded claims"):
        assert message in text


async def test_claims_on_cpus_gone_offline_are_kept_loudly(
    tmp_path: Path, machines: Machines, logs: io.StringIO
) -> None:
    machine = machines("xeon-2s-ht")
    node = node_in(tmp_path)
    await node.start(machine)
    outcome = await node.prepare(request("u1", device="cpudevnuma001"))
    smaller = Machine.build([c for c in machine.cpus if c.cpu_id not in outcome.record.cpus])
    again = node_in(tmp_path)
    await again.start(smaller)
    assert again.state.records["u1"].cpus == outcome.record.cpus
    assert "claim holds CPUs that are not online" in logs.getvalue()
    assert await again.update_topology(machine) is True
    assert again.shared_pool().online == machine.online


async def test_shared_pool_watchers_see_each_change(tmp_path: Path, machines: Machines) -> None:
    node = node_in(tmp_path)
    await node.start(machines("xeon-2s-ht"))
    queue = node.subscribe()
    first = await node.prepare(request("u1"))
    await node.attach(Container("c", Owner("p", "a")), {"u1": first.record.cpus})  # no pool change
    await node.unprepare("u1")  # no pool change while its container runs
    await node.detach("c")
    changes = [queue.get_nowait(), queue.get_nowait()]
    assert queue.empty()
    assert [c.exclusive for c in changes] == [first.record.cpus, CPUSet()]
    assert changes[0].generation < changes[1].generation
    node.unsubscribe(queue)


async def test_metrics_follow_the_state(tmp_path: Path, machines: Machines) -> None:
    registry = service_registry()
    node = node_in(tmp_path, registry=registry)
    await node.start(machines("xeon-2s-ht"))
    await node.prepare(request("u1", count=4))
    text = exposition(registry)
    for line in (
        "dra_cpu_allocated_cpus 4.0",
        "dra_cpu_available_cpus 34.0",
        "dra_cpu_reserved_cpus 2.0",
        "dra_cpu_resource_claims_active 1.0",
        'dra_cpu_claim_allocated_cpus_bucket{le="4.0"} 1.0',
    ):
        assert line in text


async def test_cpus_of_a_claim_unprepared_while_its_container_runs_are_counted_draining(
    tmp_path: Path, machines: Machines
) -> None:
    registry = service_registry()
    node = node_in(tmp_path, registry=registry)
    await node.start(machines("xeon-2s-ht"))
    first = await node.prepare(request("u1", count=2))
    await node.attach(Container("c", Owner("p", "a")), {"u1": first.record.cpus})
    await node.unprepare("u1")
    assert "dra_cpu_draining_cpus 2.0" in exposition(registry)
    await node.detach("c")
    assert "dra_cpu_draining_cpus 0.0" in exposition(registry)


async def test_available_cpus_is_what_the_published_devices_still_offer(
    tmp_path: Path, machines: Machines
) -> None:
    """small-vm: 2 CPUs; minSharedCPUs 1 keeps CPU 0 for the shared pool, so the node publishes
    a capacity of 1 and that one CPU is all a claim can get."""
    registry = service_registry()
    node = node_in(tmp_path, DeviceOptions(min_shared=1), registry=registry)
    await node.start(machines("small-vm"))
    model, _ = node.devices
    assert sum(int(d.capacity["dra.cpu/cpu"]) for d in model.devices) == 1
    assert summary(node.state).available == 1
    text = exposition(registry)
    assert "dra_cpu_available_cpus 1.0" in text
    assert "dra_cpu_allocated_cpus 0.0" in text

    await node.prepare(request("u1", count=1))
    assert summary(node.state).available == 0
    assert "dra_cpu_available_cpus 0.0" in exposition(registry)


async def test_a_caller_going_away_does_not_cut_a_prepare_short(
    tmp_path: Path, machines: Machines
) -> None:
    node = node_in(tmp_path)
    await node.start(machines("xeon-2s-ht"))
    task = asyncio.ensure_future(node.prepare(request("u1")))
    await asyncio.sleep(0)  # let it take the lock and start its file I/O
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # The next mutation queues behind the first one on the lock, so it sees it finished.
    await node.unprepare("unrelated")
    record = node.state.records["u1"]
    assert cdi.spec_path(tmp_path / "cdi", "u1").exists()
    assert saved(tmp_path) == {"u1": record}


async def test_concurrent_prepares_go_together_and_fail_alone(
    tmp_path: Path, machines: Machines
) -> None:
    node = node_in(tmp_path)
    await node.start(machines("xeon-2s-ht"))
    blocker = records.claims_dir(tmp_path / "state") / "bad-disk.json"
    blocker.mkdir()  # a directory: the record file cannot be renamed over it
    uids = [f"u{i}" for i in range(6)]
    asked = [request(uid, count=1) for uid in uids]
    asked.append(request("bad-device", count=1, device="cpudevnuma999"))
    asked.append(request("bad-disk", count=1))
    answers = await asyncio.gather(*(node.prepare(r) for r in asked), return_exceptions=True)
    by_uid = dict(zip([r.uid for r in asked], answers, strict=True))
    assert "no such device" in str(by_uid["bad-device"])
    assert "cannot write claim record" in str(by_uid["bad-disk"])
    prepared = {uid: by_uid[uid].record.cpus for uid in uids}  # type: ignore[union-attr]
    union = CPUSet(c for cpus in prepared.values() for c in cpus)
    assert sum(len(c) for c in prepared.values()) == len(union)  # no CPU in two claims
    assert {u: r.cpus for u, r in node.state.records.items()} == prepared
    blocker.rmdir()
    assert {u: r.cpus for u, r in saved(tmp_path).items()} == prepared
    specs = {s.uid for s in cdi.read_specs(tmp_path / "cdi") if not isinstance(s, StateError)}
    assert specs == set(uids)  # the failed claim's spec was removed again
    assert node.state.exclusive == union
