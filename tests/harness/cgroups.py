"""What a process's cgroups say, on both layouts the kernel offers: how the tiers' checkers and
the benchmarks read the kernel's view of a container (the services read no cgroup).

- cgroup v2 (the unified hierarchy): /sys/fs/cgroup is a cgroup2 filesystem; a process's
  cgroup is /sys/fs/cgroup/<path> from its `0::<path>` line in /proc/<pid>/cgroup, and the
  kernel's effective sets are `cpuset.cpus.effective` and `cpuset.mems.effective`, the memory
  in use `memory.current`.
- cgroup v1 (also "hybrid", v1 controllers with an empty cgroup2 hierarchy at
  /sys/fs/cgroup/unified): /sys/fs/cgroup is a tmpfs holding one hierarchy per controller; the
  process's cpuset cgroup is /sys/fs/cgroup/cpuset/<path> from its `N:cpuset:<path>` line, with
  `cpuset.cpus`, `cpuset.mems` and memory/<path>/`memory.usage_in_bytes`.

The layout is told by the filesystem type of the root (statfs, cgroup2's magic number) or,
where the root is not a mount of its own (a test's tree), by `cgroup.controllers` at its top.
"""

from __future__ import annotations

import ctypes
import enum
import os
from dataclasses import dataclass, field
from pathlib import Path

from dracpu.core.errors import InvalidInputError, NotFoundError

CGROUP_ROOT = Path("/sys/fs/cgroup")
CGROUP2_SUPER_MAGIC = 0x63677270
PROC = Path("/proc")


class Layout(enum.Enum):
    V1 = "v1"
    HYBRID = "hybrid"  # v1 controllers, plus a cgroup2 hierarchy (no controllers) at unified/
    V2 = "v2"


def _statfs_type(path: Path) -> int | None:
    """f_type of the filesystem holding `path`, or None where statfs is not available."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)  # the process's own symbols: libc's statfs
        statfs = libc.statfs
    except (OSError, AttributeError):
        return None
    buffer = ctypes.create_string_buffer(256)  # struct statfs; f_type is its first field
    if statfs(os.fsencode(path), buffer) != 0:
        return None
    return int(ctypes.c_long.from_buffer(buffer).value)


def detect(root: Path = CGROUP_ROOT) -> Layout:
    """The layout of the cgroup filesystem mounted at `root`."""
    if not root.is_dir():
        raise NotFoundError(f"no cgroup filesystem at {root}")
    if _statfs_type(root) == CGROUP2_SUPER_MAGIC or (root / "cgroup.controllers").is_file():
        return Layout.V2
    if (root / "unified" / "cgroup.controllers").is_file():
        return Layout.HYBRID
    if any((root / name).is_dir() for name in ("cpuset", "memory", "cpu")):
        return Layout.V1
    raise NotFoundError(f"{root} holds neither a cgroup2 hierarchy nor v1 controllers")


@dataclass(frozen=True)
class Membership:
    """A process's /proc/<pid>/cgroup: its path per v1 controller, and in the unified one."""

    controllers: dict[str, str] = field(default_factory=dict)  # "cpuset" -> "/kubepods/..."
    unified: str | None = None  # the `0::` line's path


def parse_membership(text: str, source: str = "/proc/self/cgroup") -> Membership:
    """Parse `hierarchy-id:controller,...:path` lines (`0::path` is the unified hierarchy)."""
    controllers: dict[str, str] = {}
    unified: str | None = None
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split(":", 2)
        if len(parts) != 3 or not parts[0].isdigit() or not parts[2].startswith("/"):
            raise InvalidInputError(
                f"{source} line {number}: {line!r} is not hierarchy-id:controllers:/path"
            )
        hierarchy, names, path = parts
        if hierarchy == "0" and names == "":
            unified = path
            continue
        for name in names.split(","):
            if name:
                controllers[name] = path
    return Membership(controllers, unified)


def membership(pid: int | str = "self", proc: Path = PROC) -> Membership:
    path = proc / str(pid) / "cgroup"
    return parse_membership(path.read_text(), str(path))


@dataclass(frozen=True)
class Cgroups:
    """The cgroup files of processes, under one root (the host's, or a test's tree)."""

    root: Path = CGROUP_ROOT
    proc: Path = PROC
    layout: Layout | None = None  # detected from root when None

    @property
    def effective_layout(self) -> Layout:
        return self.layout or detect(self.root)

    def directory(self, pid: int | str, controller: str) -> Path:
        """The directory of the process's cgroup that holds `controller`'s files."""
        seen = membership(pid, self.proc)
        if self.effective_layout is Layout.V2:
            if seen.unified is None:
                raise NotFoundError(f"process {pid} is in no cgroup v2 hierarchy")
            return self.root / seen.unified.lstrip("/")
        if controller not in seen.controllers:
            raise NotFoundError(f"process {pid} is in no {controller} cgroup")
        return self.root / controller / seen.controllers[controller].lstrip("/")

    def _file(self, pid: int | str, controller: str, v1: str, v2: str) -> Path:
        name = v2 if self.effective_layout is Layout.V2 else v1
        return self.directory(pid, controller) / name

    def cpus_file(self, pid: int | str) -> Path:
        """The file a runtime writes a container's CPUs to (`cpuset.cpus` in both layouts)."""
        return self.directory(pid, "cpuset") / "cpuset.cpus"

    def cpus(self, pid: int | str) -> str:
        """The CPUs the kernel lets the process's cgroup use: v2 `cpuset.cpus.effective`, v1
        `cpuset.cpus` (which the kernel keeps effective there)."""
        return _read(self._file(pid, "cpuset", "cpuset.cpus", "cpuset.cpus.effective"))

    def mems(self, pid: int | str) -> str:
        """The memory nodes of the process's cgroup (v2 `cpuset.mems.effective`)."""
        return _read(self._file(pid, "cpuset", "cpuset.mems", "cpuset.mems.effective"))

    def cpu_quota(self, pid: int | str) -> int | None:
        """The CPU time the process's cgroup may use per period, in microseconds (v2 the first
        field of `cpu.max`, v1 `cpu.cfs_quota_us`); None when unlimited."""
        text = _read(self._file(pid, "cpu", "cpu.cfs_quota_us", "cpu.max")).split()[0]
        return None if text in ("max", "-1") else int(text)

    def memory_bytes(self, pid: int | str) -> int:
        """The memory the process's cgroup is charged (v2 `memory.current`, v1
        `memory.usage_in_bytes`)."""
        path = self._file(pid, "memory", "memory.usage_in_bytes", "memory.current")
        text = _read(path)
        if not text.isdigit():
            raise InvalidInputError(f"{path}: {text!r} is not a byte count")
        return int(text)

    def hierarchies(self) -> list[Path]:
        """Every hierarchy under the root: the root itself on v2; on v1 each controller's (and
        each named one's) directory, co-mounted ones (cpu -> cpu,cpuacct) once."""
        if self.effective_layout is Layout.V2:
            return [self.root]
        found: dict[Path, Path] = {}
        # Real directories before the symlinks naming them.
        for entry in sorted(self.root.iterdir(), key=lambda e: (e.is_symlink(), e.name)):
            if entry.is_dir():
                found.setdefault(entry.resolve(), entry)
        return sorted(found.values())

    def tops(self, cgroup: str) -> list[Path]:
        """The directories of the cgroup `cgroup` (a path like `/dracpu-rn-1`) in each
        hierarchy that has it."""
        found = (hierarchy / cgroup.lstrip("/") for hierarchy in self.hierarchies())
        return [top for top in found if top.is_dir()]

    def procs(self, cgroup: str) -> list[int]:
        """PIDs in the cgroup `cgroup` and below it, in every hierarchy."""
        pids: set[int] = set()
        for top in self.tops(cgroup):
            for procs in top.rglob("cgroup.procs"):
                try:
                    pids.update(int(p) for p in procs.read_text().split())
                except (OSError, ValueError):
                    continue  # a cgroup removed meanwhile
        return sorted(pids)


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        raise NotFoundError(f"{path} does not exist") from None
