"""Start-up reconciliation of the saved claim records, the CDI specs on disk and the current
topology.

Pure: it decides, the caller logs the findings and writes what must be rewritten. Rules:

- record and spec agree: keep.
- record, spec missing or different: keep the record and rewrite the spec. The record is the
  acknowledged truth; only an acknowledged unprepare removes it.
- records sharing a CPU (never written so; only a hand-made or damaged state has them): keep
  the first prepared, set the others aside, say so loudly.
- spec without record: a prepare was interrupted after writing the spec, or the record was
  lost or set aside as corrupt; rebuild the record from the spec, unless its CPUs collide
  with a record (then leave the file and say so).
- no saved state at all: rebuild every record from the specs.
- record holding CPUs now offline or reserved: keep it, say so loudly.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dracpu.allocator.claims.model import ClaimRecord
from dracpu.allocator.store.cdi import SpecOnDisk
from dracpu.core.cpuset import CPUSet
from dracpu.core.errors import StateError


@dataclass(frozen=True, slots=True)
class Finding:
    level: int  # log verbosity: 0 for anything an operator must see
    message: str
    fields: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class Recovery:
    records: dict[str, ClaimRecord]
    rewrite_specs: list[str]  # uids whose CDI spec must be (re)written from the record
    findings: list[Finding]
    set_aside: list[str] = field(default_factory=list)  # saved records not kept


def reconcile(
    saved: Mapping[str, ClaimRecord] | None,
    specs: Iterable[SpecOnDisk | StateError],
    online: CPUSet,
    reserved: CPUSet,
    now_ns: int,
) -> Recovery:
    """`saved`: the records on disk, None when nothing was saved at all (a first start or a
    wiped state dir: claims found only as specs are then expected, not alarming)."""
    findings: list[Finding] = []
    records, set_aside = _disjoint(saved or {}, findings)
    on_disk = _readable(specs, findings)
    rewrite = _specs_to_rewrite(records, on_disk, findings)
    rebuilt = _rebuild_from_specs(records, on_disk, now_ns, saved is not None, findings)
    if saved is None and rebuilt:
        findings.append(Finding(0, "rebuilt claim records from CDI specs", {"claims": rebuilt}))
    _check_cpus(records, online, reserved, findings)
    return Recovery(records=records, rewrite_specs=rewrite, findings=findings, set_aside=set_aside)


def _disjoint(
    saved: Mapping[str, ClaimRecord], findings: list[Finding]
) -> tuple[dict[str, ClaimRecord], list[str]]:
    """The saved records that share no CPU, the first prepared kept; the uids of the others."""
    records: dict[str, ClaimRecord] = {}
    set_aside: list[str] = []
    taken = CPUSet()
    for record in sorted(saved.values(), key=lambda r: (r.prepared_at_ns, r.uid)):
        clash = record.cpus & taken
        if clash:
            findings.append(
                Finding(
                    0,
                    "claim record shares CPUs with an earlier claim; setting it aside",
                    {"claim": record.uid, "cpus": record.cpus.format(), "shared": clash.format()},
                )
            )
            set_aside.append(record.uid)
            continue
        records[record.uid] = record
        taken = taken | record.cpus
    return records, set_aside


def _readable(
    specs: Iterable[SpecOnDisk | StateError], findings: list[Finding]
) -> dict[str, SpecOnDisk]:
    on_disk: dict[str, SpecOnDisk] = {}
    for item in specs:
        if isinstance(item, StateError):
            findings.append(Finding(0, "ignoring unreadable CDI spec", {"error": str(item)}))
        else:
            on_disk[item.uid] = item
    return on_disk


def _specs_to_rewrite(
    records: Mapping[str, ClaimRecord], on_disk: Mapping[str, SpecOnDisk], findings: list[Finding]
) -> list[str]:
    """The recorded claims whose CDI spec is missing or disagrees with the record."""
    rewrite: list[str] = []
    for uid, record in sorted(records.items()):
        spec = on_disk.get(uid)
        if spec is None:
            findings.append(
                Finding(
                    0,
                    "CDI spec missing for a recorded claim; rewriting it",
                    {"claim": uid, "cpus": record.cpus.format()},
                )
            )
            rewrite.append(uid)
        elif spec.cpus != record.cpus:
            findings.append(
                Finding(
                    0,
                    "CDI spec disagrees with the recorded claim; rewriting it from the record",
                    {"claim": uid, "recorded": record.cpus.format(), "spec": spec.cpus.format()},
                )
            )
            rewrite.append(uid)
    return rewrite


def _rebuild_from_specs(
    records: dict[str, ClaimRecord],
    on_disk: Mapping[str, SpecOnDisk],
    now_ns: int,
    anything_saved: bool,
    findings: list[Finding],
) -> int:
    """Add a record for every spec without one whose CPUs no record holds; how many."""
    taken = CPUSet()
    for record in records.values():
        taken = taken | record.cpus
    rebuilt = 0
    for uid, spec in sorted(on_disk.items()):
        if uid in records:
            continue
        clash = spec.cpus & taken
        if clash:
            findings.append(
                Finding(
                    0,
                    "CDI spec without a record collides with recorded claims; not recovering it",
                    {
                        "claim": uid,
                        "cpus": spec.cpus.format(),
                        "collision": clash.format(),
                        "file": str(spec.path),
                    },
                )
            )
            continue
        records[uid] = ClaimRecord(
            uid=uid,
            namespace="",
            name="",
            cpus=spec.cpus,
            allocations=(),
            prepared_at_ns=now_ns,
            recovered=True,
        )
        taken = taken | spec.cpus
        rebuilt += 1
        level = 0 if anything_saved else 2
        findings.append(
            Finding(
                level, "claim rebuilt from its CDI spec", {"claim": uid, "cpus": spec.cpus.format()}
            )
        )
    return rebuilt


def _check_cpus(
    records: Mapping[str, ClaimRecord], online: CPUSet, reserved: CPUSet, findings: list[Finding]
) -> None:
    """Records holding CPUs now offline or reserved are kept, and said loudly."""
    for uid, record in sorted(records.items()):
        offline = record.cpus - online
        if offline:
            findings.append(
                Finding(
                    0,
                    "claim holds CPUs that are not online; keeping the record",
                    {"claim": uid, "offline": offline.format()},
                )
            )
        clash = record.cpus & reserved
        if clash:
            findings.append(
                Finding(
                    0,
                    "claim holds CPUs that are now reserved; keeping the record",
                    {"claim": uid, "reserved": clash.format()},
                )
            )
