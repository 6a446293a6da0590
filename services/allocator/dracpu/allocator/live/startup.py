"""Start-up recovery of the live state, before anything is published: temp files of writes cut
short removed; the claim records, the node file and the old single-file checkpoint loaded, each
one that cannot be trusted moved aside; all of it reconciled with the CDI specs and the topology
(`recovery`) and written back, so that disk and the first published state agree. Blocking I/O,
run in a thread."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from dracpu.allocator import claims
from dracpu.allocator.domain.devices import DeviceModel, build_devices
from dracpu.allocator.live.state import LiveState
from dracpu.allocator.store import cdi, checkpoint, records, recovery
from dracpu.core.errors import StateError
from dracpu.core.files import remove_durable, remove_stale_temps
from dracpu.core.log import get_logger
from dracpu.core.machine import Machine

log = get_logger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class Saved:
    """What the state directory held."""

    node_file: records.NodeFile | None
    legacy: checkpoint.Checkpoint | None
    on_disk: dict[str, claims.ClaimRecord]  # the claim record files
    # Every saved record, the old checkpoint's too; None when nothing was saved at all.
    merged: dict[str, claims.ClaimRecord] | None

    @property
    def previous(self) -> Sequence[records.NodeFile | checkpoint.Checkpoint]:
        return [p for p in (self.node_file, self.legacy) if p is not None]


def recover(live: LiveState, machine: Machine) -> claims.NodeState:
    """Load, cross-check and rewrite the durable state (blocking I/O, in a thread)."""
    devices = build_devices(machine, live.options)
    _make_dirs(live)
    _remove_stale_temps(live)
    saved = _load_saved(live)
    specs = list(cdi.read_specs(live.cdi_dir))
    if saved.merged is None:
        # Silent only on a first start: nothing recorded and nothing on disk.
        log.info(
            0 if specs else 2,
            "no saved claim records; rebuilding them from CDI specs",
            cdi_dir=str(live.cdi_dir),
            specs=len(specs),
        )
    result = recovery.reconcile(
        saved.merged,
        specs,
        machine.online,
        live.options.reserved,
        live.clock(),
    )
    for finding in result.findings:
        if finding.level == 0:
            log.warning(finding.message, **finding.fields)
        else:
            log.info(finding.level, finding.message, **finding.fields)
    state = _first_state(live, machine, devices, saved, result)
    kept_legacy = _write_claims(live, saved, result)
    # Also makes the claims directory's own entry durable (one fsync of the state dir).
    records.write_node(live.state_dir, live.node_file(state))
    records.save_generations(
        live.state_dir, state.pool_generation, state.claims_generation, durable=True
    )
    if saved.legacy is not None:
        _retire_checkpoint(live, saved.legacy, kept_legacy)
    return state


def _make_dirs(live: LiveState) -> None:
    try:
        # Runtimes watch the CDI directory; it should exist before the first spec.
        live.cdi_dir.mkdir(mode=0o755, parents=True, exist_ok=True)
        live.state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise StateError(f"cannot create {exc.filename}: {exc.strerror or exc}") from None


def _remove_stale_temps(live: LiveState) -> None:
    stale = (
        remove_stale_temps(live.cdi_dir, cdi.FILE_PREFIX)
        + remove_stale_temps(live.state_dir, checkpoint.FILE_NAME)
        + remove_stale_temps(live.state_dir, records.NODE_FILE)
        + remove_stale_temps(live.state_dir, records.GENERATIONS_FILE)
        + remove_stale_temps(records.claims_dir(live.state_dir), "")
    )
    if stale:
        log.info(2, "removed temp files of writes cut short", files=",".join(sorted(stale)))


def _load_saved(live: LiveState) -> Saved:
    node_file = _load_trusted(live.state_dir, records.load_node, records.node_path(live.state_dir))
    legacy = _load_trusted(live.state_dir, checkpoint.load, checkpoint.path_in(live.state_dir))
    loaded = records.load_records(live.state_dir)
    on_disk = dict(loaded.records) if loaded is not None else {}
    for bad in loaded.bad if loaded is not None else []:
        try:
            aside = records.move_aside(bad.path)
        except OSError as move_error:
            raise StateError(f"{bad.error}; cannot move it aside: {move_error}") from None
        log.error(
            "claim record cannot be trusted; moved aside, rebuilding the claim from its CDI spec",
            claim=bad.uid,
            error=bad.error,
            moved_to=str(aside),
        )
    saved: dict[str, claims.ClaimRecord] | None = None
    if loaded is not None or legacy is not None:
        # A migration cut short left both: the record files were written from the old
        # checkpoint, so either copy will do.
        saved = {r.uid: r for r in legacy.records} if legacy is not None else {}
        saved.update(on_disk)
    return Saved(node_file=node_file, legacy=legacy, on_disk=on_disk, merged=saved)


def _load_trusted(state_dir: Path, load: Callable[[Path], T], path: Path) -> T | None:
    """A saved file, None when absent; one that cannot be trusted is moved aside."""
    try:
        return load(state_dir)
    except (records.CorruptRecordError, checkpoint.CorruptCheckpointError) as exc:
        error = str(exc)
    try:
        aside = records.move_aside(path)
    except OSError as move_error:
        raise StateError(f"{error}; cannot move it aside: {move_error}") from None
    log.error("saved state cannot be trusted; moved aside", error=error, moved_to=str(aside))
    return None


def _first_state(
    live: LiveState,
    machine: Machine,
    devices: DeviceModel,
    saved: Saved,
    result: recovery.Recovery,
) -> claims.NodeState:
    """The recovered state, its generations past every one saved, its devices published."""
    previous = saved.previous
    counted = records.read_generations(live.state_dir)
    pool_generation = max([p.pool_generation for p in previous] + [counted[0] if counted else 0])
    claims_generation = max(
        [p.claims_generation for p in previous] + [counted[1] if counted else 0]
    )
    state = claims.NodeState(
        machine=machine,
        devices=devices,
        records=result.records,
        pool_generation=pool_generation + 1,
        claims_generation=claims_generation + 1,
    )
    live.devices.restart(state, previous[0] if previous else None)
    if state.unaccounted:
        log.warning(
            "claims prepared for other devices hold CPUs; those stay unpublished until "
            "the claims are released",
            cpus=state.unaccounted.format(),
            mode=devices.mode,
            group_by=devices.group_by,
        )
    return state


def _write_claims(live: LiveState, saved: Saved, result: recovery.Recovery) -> bool:
    """The CDI specs and record files the recovered records need, and the records set aside
    moved out of the way. True when a claim set aside is only in the old checkpoint."""
    for uid in result.rewrite_specs:
        cdi.write_spec(live.cdi_dir, uid, result.records[uid].cpus)
    claims_dir = records.claims_dir(live.state_dir)
    try:
        claims_dir.mkdir(mode=0o700, exist_ok=True)
    except OSError as exc:
        raise StateError(f"cannot create {claims_dir}: {exc.strerror or exc}") from None
    for uid, record in sorted(result.records.items()):
        if saved.on_disk.get(uid) != record:  # migrated, or rebuilt from a spec or adopted
            records.write_record(live.state_dir, record)
    kept_legacy = False
    for uid in result.set_aside:
        if uid in saved.on_disk:
            aside = records.move_aside(records.record_path(live.state_dir, uid))
            log.error("claim record set aside", claim=uid, moved_to=str(aside))
        else:
            kept_legacy = True
    return kept_legacy


def _retire_checkpoint(live: LiveState, legacy: checkpoint.Checkpoint, kept: bool) -> None:
    """Only once every record file is durable may the old checkpoint go; kept aside when it
    held a claim set aside."""
    legacy_path = checkpoint.path_in(live.state_dir)
    if kept:
        aside = records.move_aside(legacy_path)
        log.error("old checkpoint kept: it held a claim set aside", moved_to=str(aside))
    else:
        remove_durable(legacy_path)
    log.info(
        0,
        "migrated the single-file checkpoint to one record file per claim",
        claims=len(legacy.records),
        claims_dir=str(records.claims_dir(live.state_dir)),
    )
