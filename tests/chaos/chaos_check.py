"""The invariants of a chaos run, read from the kernel and the node's files, never from the
driver's own view of itself.

After every settle: no CPU in two claims; every claimed container on exactly its claim and
every shared container on the shared pool (the kernel's cgroup `cpuset.cpus` and the process's
`Cpus_allowed_list`); every acknowledged prepare still prepared (its allocator record and CDI
spec on disk, the api serving it); nothing left of a released claim (record, CDI spec) and no
socket but the run's own.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.containerd_node import CGROUPS, NodeError, cgroup_cpuset, cpus_allowed

from dracpu.core.cpuset import CPUSet

ONLINE = CPUSet.parse(Path("/sys/devices/system/cpu/online").read_text().strip())


@dataclass
class Live:
    """A claim the workload holds: acknowledged by a successful prepare, not yet released."""

    name: str
    uid: str
    cpus: CPUSet
    cdi_devices: tuple[str, ...]
    containers: dict[str, str] = field(default_factory=dict)  # container id -> pod id
    # The name of the claim's container, from its first one on: a claim belongs to one
    # container of its pod, which the node may run again (a new id, the same name).
    container_name: str = ""


@dataclass
class Book:
    """What the workload believes the node runs; the checker compares the kernel with it."""

    claims: dict[str, Live] = field(default_factory=dict)  # uid -> claim
    shared: dict[str, str] = field(default_factory=dict)  # container id -> pod id
    releasing: dict[str, str] = field(default_factory=dict)  # uid -> name, release asked
    released: set[str] = field(default_factory=set)  # uids released since the last check

    def claimed_cpus(self) -> CPUSet:
        owned = CPUSet()
        for claim in self.claims.values():
            owned = owned | claim.cpus
        return owned


def kernel_cpus(pid: int) -> tuple[CPUSet, CPUSet] | None:
    """(cgroup cpuset.cpus, Cpus_allowed_list) of a process; None once it has exited."""
    try:
        return CPUSet.parse(cgroup_cpuset(pid)), CPUSet.parse(cpus_allowed(pid))
    except (OSError, NodeError):
        return None


def cpuset_file(pid: int) -> Path:
    """The cpuset.cpus file of the cgroup a process is in (cgroup v1 cpuset hierarchy or v2)."""
    return CGROUPS.cpus_file(pid)


def check(
    book: Book,
    pids: dict[str, int],
    run_dir: Path,
    served_claims: dict[str, str],
    expected_sockets: set[Path],
) -> list[str]:
    """Every invariant that does not hold, one line each. `pids` maps each container of the
    book to its process; `served_claims` is what the api serves (uid -> cpus)."""
    violations: list[str] = []
    owned = CPUSet()
    for claim in book.claims.values():
        overlap = owned & claim.cpus
        if overlap:
            violations.append(f"CPUs {overlap} are in two claims (one is {claim.name})")
        owned = owned | claim.cpus
    pool = ONLINE - owned
    wanted: dict[str, tuple[str, CPUSet]] = {}
    for claim in book.claims.values():
        for cid in claim.containers:
            wanted[cid] = (f"claimed container {cid[:12]} of {claim.name}", claim.cpus)
    for cid in book.shared:
        wanted[cid] = (f"shared container {cid[:12]}", pool)
    for cid, (what, cpus) in wanted.items():
        pid = pids.get(cid)
        seen = kernel_cpus(pid) if pid else None
        if seen is None:
            violations.append(f"{what} has no running process")
            continue
        cgroup, allowed = seen
        if cgroup != cpus or allowed != cpus:
            violations.append(
                f"{what}: kernel cpuset.cpus={cgroup} Cpus_allowed_list={allowed}, want {cpus}"
            )
    for claim in book.claims.values():
        record = run_dir / "state" / "claims" / f"{claim.uid}.json"
        spec = run_dir / "cdi" / f"dra.k8s.io-cpu_claim-{claim.uid}.json"
        for path in (record, spec):
            if not path.exists():
                violations.append(f"acknowledged claim {claim.name}: {path.name} is gone")
        served = served_claims.get(claim.uid)
        if served is None or CPUSet.parse(served) != claim.cpus:
            violations.append(f"acknowledged claim {claim.name} on {claim.cpus}: api has {served}")
    for uid in book.released:
        for path in (
            run_dir / "state" / "claims" / f"{uid}.json",
            run_dir / "cdi" / f"dra.k8s.io-cpu_claim-{uid}.json",
        ):
            if path.exists():
                violations.append(f"released claim {uid}: {path} left behind")
        if uid in served_claims:
            violations.append(f"released claim {uid} still served by the api")
    sockets = set()
    for path in run_dir.rglob("*"):
        with contextlib.suppress(OSError):
            if path.is_socket():
                sockets.add(path)
    for stray in sorted(sockets - expected_sockets):
        violations.append(f"socket {stray} is not one of the run's")
    return violations


def served(claims: list[dict[str, Any]]) -> dict[str, str]:
    return {str(c["uid"]): str(c["cpus"]) for c in claims}
