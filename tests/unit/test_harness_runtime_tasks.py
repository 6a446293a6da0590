"""A node's running containers as containerd's task folders and /proc show them
(harness.runtime_tasks): the folders and /proc are laid out here as containerd 2 and the kernel
lay them out."""

from __future__ import annotations

import json
import os
from pathlib import Path

from harness.runtime_tasks import running_tasks, status_field

SCOPE = "/kubepods.slice/kubepods-pod1.slice/cri-containerd-{id}.scope"


def task(
    folder: Path,
    proc: Path,
    cid: str,
    pid: int,
    kind: str = "container",
    comm: str = "sleep",
    state: str = "S (sleeping)",
    cgroup_of: str | None = None,
) -> None:
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
    process = proc / str(pid)
    process.mkdir(parents=True)
    (process / "cgroup").write_text(f"0::{SCOPE.format(id=cgroup_of or cid)}\n")
    (process / "comm").write_text(f"{comm}\n")
    (process / "status").write_text(f"Name:\t{comm}\nState:\t{state}\nCpus_allowed_list:\t0-7\n")


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
