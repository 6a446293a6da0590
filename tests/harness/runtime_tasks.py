"""A node's running containers read from containerd's task folders and /proc alone.

containerd keeps a folder per task of a namespace (`<state>/io.containerd.runtime.v2.task/
<namespace>/<id>`) holding the bundle's OCI spec, whose annotations its CRI plugin writes (the
pod's namespace and name, the container's name, whether it is a sandbox), and the pid of the
task's first process (`init.pid`). Reading them starts no process: under emulation a crictl run
takes seconds of a busy guest, a walk of these folders a few milliseconds."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dracpu.core.cpuset import CPUSet

# Processes that are a container's runtime, not the container: runc's init runs in the
# container's cgroup before runc has written its cpuset (then execs the container's command).
RUNTIME_COMMS = ("runc:[0:PARENT]", "runc:[1:CHILD]", "runc:[2:INIT]", "runc")
TYPE = "io.kubernetes.cri.container-type"
CONTAINER_ID = re.compile(r"[0-9a-f]{64}")
POD_UID = re.compile(
    r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})"
)
KEY = tuple(
    f"io.kubernetes.cri.{k}" for k in ("sandbox-namespace", "sandbox-name", "container-name")
)


def status_field(pid: int, name: str, proc: Path = Path("/proc")) -> str:
    """One field of /proc/<pid>/status."""
    for line in (proc / str(pid) / "status").read_text().splitlines():
        if line.startswith(f"{name}:"):
            return line.split(":", 1)[1].strip()
    raise LookupError(f"/proc/{pid}/status has no {name}")


def runtime_process(entry: Path, comm: str | None = None) -> bool:
    """Whether the process of /proc entry `entry` (named `comm`, read when not given) is the
    runtime's own, not a container's: named as runc names the stages of its init, or, before
    the first of them renames it (its name then is its binary's), carrying the _LIBCONTAINER_
    variables runc hands its init."""
    if comm is None:
        comm = (entry / "comm").read_text().strip()
    if comm in RUNTIME_COMMS:
        return True
    return b"\0_LIBCONTAINER_" in b"\0" + (entry / "environ").read_bytes()


def _first_process(task: Path, proc: Path) -> int | None:
    """The pid of the task's first process while it is alive (no zombie) and in the task's
    own cgroup (not a reused pid); None otherwise."""
    with contextlib.suppress(OSError, LookupError, ValueError):  # created or ended in between
        pid = int((task / "init.pid").read_text())
        if task.name in (proc / str(pid) / "cgroup").read_text() and not status_field(
            pid, "State", proc
        ).startswith(("Z", "X")):
            return pid
    return None


def running_tasks(folder: Path, proc: Path = Path("/proc")) -> dict[str, tuple[str, int]]:
    """Every running container of the tasks `folder`, by id: its `namespace/pod/container` and
    its first process. Not running: a task whose process is still runc's init (created, not
    started), has ended (gone, or a zombie the shim has not reaped) or is a process of another
    cgroup (its pid reused); sandboxes are no containers."""
    running: dict[str, tuple[str, int]] = {}
    for task in folder.glob("*"):
        with contextlib.suppress(OSError, LookupError, ValueError):  # created or ended in between
            annotations = json.loads((task / "config.json").read_text())["annotations"]
            if annotations.get(TYPE) != "container":
                continue
            pid = _first_process(task, proc)
            if pid is None or runtime_process(proc / str(pid)):
                continue
            running[task.name] = ("/".join(annotations[k] for k in KEY), pid)
    return running


def pod_processes(
    proc: Path = Path("/proc"), cgroup_root: Path = Path("/sys/fs/cgroup")
) -> Iterator[tuple[int, str, CPUSet]]:
    """Every live process in a cgroup of the kubelet's pods (cgroup v2): its pid, its cgroup's
    path and the CPUs the kernel lets it run on (its Cpus_allowed_list with its cgroup's
    cpuset.cpus.effective). Read from /proc and the cgroup files alone, no process started, so
    it can be walked often; runc's own processes (a container being created) and zombies left
    out, a process that ends during the walk skipped."""
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, LookupError, ValueError):  # ended in between
            cgroup = (entry / "cgroup").read_text().strip().rpartition("::")[2]
            if "/kubepods" not in cgroup or runtime_process(entry):
                continue
            status = dict(
                line.split(":", 1) for line in (entry / "status").read_text().splitlines()
            )
            if status["State"].strip().startswith(("Z", "X")):
                continue
            cpus = CPUSet.parse(status["Cpus_allowed_list"].strip())
            effective = cgroup_root / cgroup.lstrip("/") / "cpuset.cpus.effective"
            with contextlib.suppress(OSError):
                cpus = cpus | CPUSet.parse(effective.read_text())
            yield int(entry.name), cgroup, cpus


def stray_processes(
    folder: Path, proc: Path = Path("/proc"), cgroup_root: Path = Path("/sys/fs/cgroup")
) -> dict[str, dict[str, Any]]:
    """Processes the kernel runs in the kubelet's pod cgroups (cgroup v2) that no live task of
    `folder` accounts for, by cgroup path, with the CPUs they may run on (each one's
    Cpus_allowed_list and its cgroup's cpuset.cpus.effective): in a container's cgroup whose
    task folder is gone or whose first process has ended (a runtime that lost track of a
    shim, its processes running on), or in a pod's own cgroup, where no process belongs.
    runc's own processes (a container being created) and zombies are none; a task that ends
    during the walk may show once."""
    live = {task.name for task in folder.glob("*") if _first_process(task, proc) is not None}
    strays: dict[str, dict[str, Any]] = {}
    for pid, cgroup, cpus in pod_processes(proc, cgroup_root):
        owner = CONTAINER_ID.findall(cgroup.rpartition("/")[2])
        if owner and owner[-1] in live:
            continue
        found = strays.setdefault(cgroup, {"pids": [], "cpus": CPUSet()})
        found["pids"].append(pid)
        found["cpus"] = found["cpus"] | cpus
    return {
        cgroup: {"pids": sorted(found["pids"]), "cpus": found["cpus"].format()}
        for cgroup, found in strays.items()
    }


def pod_uid(cgroup: str) -> str:
    """The pod UID a kubelet cgroup path names (`pod<uid>` under the cgroupfs driver,
    `kubepods-...-pod<uid with underscores>.slice` under systemd's); "" when none."""
    found = POD_UID.search(cgroup)
    return found.group(1).replace("_", "-") if found else ""
