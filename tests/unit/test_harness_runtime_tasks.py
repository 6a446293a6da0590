"""A node's running containers as containerd's task folders and /proc show them
(harness.runtime_tasks): the folders and /proc are laid out here as containerd 2 and the kernel
lay them out."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from harness.runtime_tasks import pod_uid, running_tasks, status_field, stray_processes

SCOPE = "/kubepods.slice/kubepods-pod1.slice/cri-containerd-{id}.scope"


def process(
    proc: Path,
    pid: int,
    cgroup: str,
    comm: str = "sleep",
    state: str = "S (sleeping)",
    cpus: str = "0-7",
    environ: bytes = b"PATH=/usr/bin\0",
) -> None:
    """A /proc entry as the kernel lays it out, as far as the walks read it."""
    entry = proc / str(pid)
    entry.mkdir(parents=True)
    (entry / "cgroup").write_text(f"0::{cgroup}\n")
    (entry / "comm").write_text(f"{comm}\n")
    (entry / "environ").write_bytes(environ)
    (entry / "status").write_text(f"Name:\t{comm}\nState:\t{state}\nCpus_allowed_list:\t{cpus}\n")


def task(
    folder: Path,
    proc: Path,
    cid: str,
    pid: int,
    kind: str = "container",
    cgroup_of: str | None = None,
    **first: Any,
) -> None:
    """A task folder as containerd 2 writes it, and its first process (`process`'s fields)."""
    bundle = folder / cid
    bundle.mkdir(parents=True)
    annotations = {
        "io.kubernetes.cri.container-type": kind,
        "io.kubernetes.cri.sandbox-namespace": "ns",
        "io.kubernetes.cri.sandbox-name": "pod",
        "io.kubernetes.cri.container-name": f"c-{cid}",
    }
    (bundle / "config.json").write_text(
        json.dumps({"ociVersion": "1.2.0", "annotations": annotations})
    )
    (bundle / "init.pid").write_text(str(pid))
    process(proc, pid, SCOPE.format(id=cgroup_of or cid), **first)


def test_a_started_container_is_running_by_its_pod_and_name(tmp_path: Path) -> None:
    folder, proc = tmp_path / "k8s.io", tmp_path / "proc"
    task(folder, proc, "aaa", 101)
    assert running_tasks(folder, proc) == {"aaa": ("ns/pod/c-aaa", 101)}


def test_what_is_no_running_container_is_left_out(tmp_path: Path) -> None:
    folder, proc = tmp_path / "k8s.io", tmp_path / "proc"
    task(folder, proc, "sandbox", 1, kind="sandbox", comm="pause")
    task(folder, proc, "created", 2, comm="runc:[2:INIT]")
    task(folder, proc, "exited", 3, state="Z (zombie)")
    task(folder, proc, "reused", 4, cgroup_of="another")
    (folder / "gone").mkdir()  # its process ended and was reaped: no /proc entry
    (folder / "gone" / "config.json").write_text(
        json.dumps({"annotations": {"io.kubernetes.cri.container-type": "container"}})
    )
    (folder / "gone" / "init.pid").write_text("5")
    (folder / "creating").mkdir()  # its spec written, its process not yet
    # runc's init before its first stage renames it: its binary's name, runc's variables.
    task(folder, proc, "starting", 8, comm="exe", environ=b"_LIBCONTAINER_INITPIPE=3\0")
    task(folder, proc, "running", 6)
    assert running_tasks(folder, proc) == {"running": ("ns/pod/c-running", 6)}


def test_a_torn_spec_is_read_again_on_the_next_walk(tmp_path: Path) -> None:
    folder, proc = tmp_path / "k8s.io", tmp_path / "proc"
    task(folder, proc, "aaa", 7)
    (folder / "aaa" / "config.json").write_text('{"annotations": {')
    assert running_tasks(folder, proc) == {}


def test_no_folder_is_no_container(tmp_path: Path) -> None:
    assert running_tasks(tmp_path / "absent", tmp_path) == {}


def test_a_status_field_is_read_from_the_kernel(tmp_path: Path) -> None:
    assert status_field(os.getpid(), "Pid") == str(os.getpid())


def cid(n: int) -> str:
    """A container id as containerd makes them: 64 hex digits."""
    return f"{n:064x}"


def strays(tmp_path: Path) -> dict[str, dict[str, object]]:
    return stray_processes(tmp_path / "k8s.io", tmp_path / "proc", tmp_path / "cgroup")


def test_every_process_of_a_live_task_is_accounted_for(tmp_path: Path) -> None:
    folder, proc = tmp_path / "k8s.io", tmp_path / "proc"
    task(folder, proc, cid(1), 101)
    task(folder, proc, cid(2), 102, kind="sandbox", comm="pause")
    process(proc, 103, SCOPE.format(id=cid(1)))  # a child of the container's command
    process(proc, 104, "/system.slice/containerd.service")  # not a pod's
    assert strays(tmp_path) == {}


def test_processes_of_a_task_the_runtime_no_longer_has_are_strays_with_their_cpus(
    tmp_path: Path,
) -> None:
    lost = SCOPE.format(id=cid(3))
    process(tmp_path / "proc", 201, lost, cpus="2")  # its task folder gone, still running
    process(tmp_path / "proc", 202, lost, cpus="3")
    effective = tmp_path / "cgroup" / lost.lstrip("/") / "cpuset.cpus.effective"
    effective.parent.mkdir(parents=True)
    effective.write_text("2-4\n")
    assert strays(tmp_path) == {lost: {"pids": [201, 202], "cpus": "2-4"}}


def test_processes_left_when_the_first_one_ended_are_strays(tmp_path: Path) -> None:
    task(tmp_path / "k8s.io", tmp_path / "proc", cid(4), 301, state="Z (zombie)")
    process(tmp_path / "proc", 302, SCOPE.format(id=cid(4)))
    assert strays(tmp_path) == {SCOPE.format(id=cid(4)): {"pids": [302], "cpus": "0-7"}}


def test_a_process_in_a_pods_own_cgroup_is_a_stray(tmp_path: Path) -> None:
    process(tmp_path / "proc", 401, "/kubepods.slice/kubepods-pod1.slice", cpus="5")
    assert strays(tmp_path) == {"/kubepods.slice/kubepods-pod1.slice": {"pids": [401], "cpus": "5"}}


def test_runc_and_zombies_are_no_strays(tmp_path: Path) -> None:
    process(tmp_path / "proc", 501, SCOPE.format(id=cid(5)), comm="runc:[2:INIT]")
    process(tmp_path / "proc", 502, SCOPE.format(id=cid(6)), state="Z (zombie)")
    runc = b"PATH=/usr/bin\0_LIBCONTAINER_INITPIPE=3\0_LIBCONTAINER_STATEDIR=/run\0"
    process(tmp_path / "proc", 503, SCOPE.format(id=cid(7)), comm="exe", environ=runc)
    assert strays(tmp_path) == {}


def test_a_pods_uid_is_read_from_either_cgroup_drivers_path() -> None:
    uid = "0f1e2d3c-aaaa-bbbb-cccc-0123456789ab"
    assert pod_uid(f"/kubepods/besteffort/pod{uid}/{cid(1)}") == uid
    systemd = f"/kubepods.slice/kubepods-pod{uid.replace('-', '_')}.slice/cri-containerd-x.scope"
    assert pod_uid(systemd) == uid
    assert pod_uid("/kubepods.slice") == ""
