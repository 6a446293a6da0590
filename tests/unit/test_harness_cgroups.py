"""harness.cgroups reads a process's cpuset and memory on cgroup v1, hybrid and v2 trees."""

from __future__ import annotations

from pathlib import Path

import pytest
from harness.cgroups import (
    CGROUP_ROOT,
    Cgroups,
    Layout,
    detect,
    parse_membership,
)

from dracpu.core.errors import InvalidInputError, NotFoundError

POD = "/kubepods/pod1/c1"

V1_PROC = f"""12:cpu,cpuacct:{POD}
9:name=systemd:{POD}
4:memory:{POD}
3:cpuset:{POD}
"""
HYBRID_PROC = V1_PROC + f"0::{POD}\n"
V2_PROC = f"0::{POD}\n"


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def proc_of(tmp_path: Path, text: str, pid: int = 42) -> Path:
    proc = tmp_path / "proc"
    write(proc / str(pid) / "cgroup", text)
    return proc


def v1_tree(root: Path, *, hybrid: bool = False) -> Path:
    cpuset = root / "cpuset" / POD.lstrip("/")
    write(cpuset / "cpuset.cpus", "2-3\n")
    write(cpuset / "cpuset.mems", "1\n")
    write(cpuset / "cgroup.procs", "42\n43\n")
    memory = root / "memory" / POD.lstrip("/")
    write(memory / "memory.usage_in_bytes", "1048576\n")
    write(memory / "cgroup.procs", "42\n43\n")
    (root / "cpu,cpuacct").mkdir()
    (root / "cpu").symlink_to("cpu,cpuacct")
    (root / "cpuacct").symlink_to("cpu,cpuacct")
    if hybrid:
        write(root / "unified" / "cgroup.controllers", "\n")
        write(root / "unified" / POD.lstrip("/") / "cgroup.procs", "42\n")
    return root


def v2_tree(root: Path) -> Path:
    write(root / "cgroup.controllers", "cpuset cpu io memory pids\n")
    cgroup = root / POD.lstrip("/")
    write(cgroup / "cpuset.cpus", "\n")  # nothing asked: the parent's CPUs apply
    write(cgroup / "cpuset.cpus.effective", "0-1,4\n")
    write(cgroup / "cpuset.mems.effective", "0\n")
    write(cgroup / "memory.current", "4096\n")
    write(cgroup / "cgroup.procs", "42\n")
    write(root / "kubepods" / "pod1" / "c2" / "cgroup.procs", "44\n")
    return root


class TestDetect:
    def test_the_unified_hierarchy_is_v2(self, tmp_path: Path) -> None:
        assert detect(v2_tree(tmp_path)) is Layout.V2

    def test_v1_controllers_with_an_empty_unified_hierarchy_are_hybrid(
        self, tmp_path: Path
    ) -> None:
        assert detect(v1_tree(tmp_path, hybrid=True)) is Layout.HYBRID

    def test_v1_controllers_alone_are_v1(self, tmp_path: Path) -> None:
        assert detect(v1_tree(tmp_path)) is Layout.V1

    def test_a_tree_without_cgroups_is_refused_naming_it(self, tmp_path: Path) -> None:
        with pytest.raises(NotFoundError, match="neither a cgroup2 hierarchy nor v1"):
            detect(tmp_path)
        with pytest.raises(NotFoundError, match="no cgroup filesystem"):
            detect(tmp_path / "absent")

    def test_this_machine_has_a_layout(self) -> None:
        if not CGROUP_ROOT.is_dir():
            pytest.skip("no /sys/fs/cgroup here")
        assert detect() in set(Layout)


class TestMembership:
    def test_v1_lines_give_each_controller_its_path(self) -> None:
        seen = parse_membership(V1_PROC)
        assert seen.controllers["cpuset"] == POD
        assert seen.controllers["cpu"] == seen.controllers["cpuacct"] == POD
        assert seen.controllers["name=systemd"] == POD
        assert seen.unified is None

    def test_the_zero_line_is_the_unified_path(self) -> None:
        assert parse_membership(V2_PROC).unified == POD
        assert parse_membership(HYBRID_PROC).unified == POD
        assert parse_membership("0::/\n").controllers == {}

    def test_a_path_with_colons_stays_whole(self) -> None:
        assert parse_membership("0::/a:b/c\n").unified == "/a:b/c"

    @pytest.mark.parametrize("line", ["cpuset:/x", "x:cpuset:/x", "3:cpuset:relative"])
    def test_a_malformed_line_is_refused_with_its_number(self, line: str) -> None:
        with pytest.raises(InvalidInputError, match=r"/proc/7/cgroup line 2: "):
            parse_membership(f"0::/\n{line}\n", "/proc/7/cgroup")


class TestReads:
    @pytest.mark.parametrize("hybrid", [False, True])
    def test_v1_reads_the_cpuset_and_memory_hierarchies(self, tmp_path: Path, hybrid: bool) -> None:
        groups = Cgroups(
            v1_tree(tmp_path / "cg", hybrid=hybrid),
            proc_of(tmp_path, HYBRID_PROC if hybrid else V1_PROC),
        )
        assert groups.cpus(42) == "2-3"
        assert groups.mems(42) == "1"
        assert groups.memory_bytes(42) == 1048576
        assert groups.cpus_file(42) == tmp_path / "cg" / "cpuset" / POD.lstrip("/") / "cpuset.cpus"

    def test_v2_reads_the_effective_sets_of_the_unified_cgroup(self, tmp_path: Path) -> None:
        groups = Cgroups(v2_tree(tmp_path / "cg"), proc_of(tmp_path, V2_PROC))
        assert groups.cpus(42) == "0-1,4"
        assert groups.mems(42) == "0"
        assert groups.memory_bytes(42) == 4096
        assert groups.cpus_file(42) == tmp_path / "cg" / POD.lstrip("/") / "cpuset.cpus"

    def test_a_given_layout_is_taken_as_is(self, tmp_path: Path) -> None:
        groups = Cgroups(tmp_path / "cg", proc_of(tmp_path, V2_PROC), layout=Layout.V2)
        with pytest.raises(NotFoundError, match=r"cpuset\.cpus\.effective does not exist"):
            groups.cpus(42)

    def test_a_process_outside_the_cpuset_hierarchy_is_named(self, tmp_path: Path) -> None:
        groups = Cgroups(v1_tree(tmp_path / "cg"), proc_of(tmp_path, f"4:memory:{POD}\n"))
        with pytest.raises(NotFoundError, match="process 42 is in no cpuset cgroup"):
            groups.cpus(42)
        v2 = Cgroups(v2_tree(tmp_path / "v2"), proc_of(tmp_path, f"4:memory:{POD}\n"))
        with pytest.raises(NotFoundError, match="process 42 is in no cgroup v2 hierarchy"):
            v2.cpus(42)

    def test_a_memory_file_that_is_no_count_is_refused(self, tmp_path: Path) -> None:
        root = v2_tree(tmp_path / "cg")
        (root / POD.lstrip("/") / "memory.current").write_text("max\n")
        with pytest.raises(InvalidInputError, match="'max' is not a byte count"):
            Cgroups(root, proc_of(tmp_path, V2_PROC)).memory_bytes(42)

    def test_a_vanished_process_is_an_os_error(self, tmp_path: Path) -> None:
        with pytest.raises(FileNotFoundError):
            Cgroups(v2_tree(tmp_path / "cg"), tmp_path / "proc").cpus(99)


class TestHierarchies:
    def test_v2_has_one_hierarchy_and_finds_every_process_below_a_cgroup(
        self, tmp_path: Path
    ) -> None:
        groups = Cgroups(v2_tree(tmp_path / "cg"), proc_of(tmp_path, V2_PROC))
        assert groups.hierarchies() == [tmp_path / "cg"]
        assert groups.procs("/kubepods") == [42, 44]
        assert groups.tops("/kubepods/pod1") == [tmp_path / "cg" / "kubepods" / "pod1"]

    def test_v1_counts_co_mounted_controllers_once(self, tmp_path: Path) -> None:
        root = v1_tree(tmp_path / "cg", hybrid=True)
        groups = Cgroups(root, proc_of(tmp_path, HYBRID_PROC))
        names = [path.name for path in groups.hierarchies()]
        assert names == ["cpu,cpuacct", "cpuset", "memory", "unified"]
        assert groups.procs(POD) == [42, 43]
        assert [top.parts[-2] for top in groups.tops("/kubepods")] == [
            "cpuset",
            "memory",
            "unified",
        ]
        assert groups.procs("/absent") == []
