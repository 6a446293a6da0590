"""A node's running containers read from containerd's task folders and /proc alone.

containerd keeps a folder per task of a namespace (`<state>/io.containerd.runtime.v2.task/
<namespace>/<id>`) holding the bundle's OCI spec, whose annotations its CRI plugin writes (the
pod's namespace and name, the container's name, whether it is a sandbox), and the pid of the
task's first process (`init.pid`). Reading them starts no process: under emulation a crictl run
takes seconds of a busy guest, a walk of these folders a few milliseconds."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

# Processes that are a container's runtime, not the container: runc's init runs in the
# container's cgroup before runc has written its cpuset (then execs the container's command).
RUNTIME_COMMS = ("runc:[0:PARENT]", "runc:[1:CHILD]", "runc:[2:INIT]", "runc")
TYPE = "io.kubernetes.cri.container-type"
KEY = tuple(
    f"io.kubernetes.cri.{k}" for k in ("sandbox-namespace", "sandbox-name", "container-name")
)


def status_field(pid: int, name: str, proc: Path = Path("/proc")) -> str:
    """One field of /proc/<pid>/status."""
    for line in (proc / str(pid) / "status").read_text().splitlines():
        if line.startswith(f"{name}:"):
            return line.split(":", 1)[1].strip()
    raise LookupError(f"/proc/{pid}/status has no {name}")


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
            pid = int((task / "init.pid").read_text())
            process = proc / str(pid)
            if (
                task.name not in (process / "cgroup").read_text()
                or (process / "comm").read_text().strip() in RUNTIME_COMMS
                or status_field(pid, "State", proc).startswith(("Z", "X"))
            ):
                continue
            running[task.name] = ("/".join(annotations[k] for k in KEY), pid)
    return running
