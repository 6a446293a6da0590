"""`dracpu gatherinfo`: the report's layout, where it goes, and one-line refusals of bad input."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from logformats import klog_lines

from dracpu.core import __version__
from dracpu.core.config import DriverConfig
from dracpu.core.machine import Machine
from dracpu.topology import gatherinfo
from dracpu.topology.discovery import discover
from dracpu.topology.fixtures import FIXTURES, write_fixture

REPORT_NAME = re.compile(r"^dracpu-gatherinfo-\d{8}-\d{6}-\d+\.yaml$")


def dracpu(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> Any:
    return subprocess.run(
        [sys.executable, "-m", "dracpu.core.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        env={**os.environ, **(env or {})},
    )


def assert_one_line_error(result: Any, *fragments: str) -> None:
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("dracpu gatherinfo: error: ")
    for fragment in fragments:
        assert fragment in lines[0]
    assert "Traceback" not in result.stderr


def check_report(text: str, root: Path) -> dict[str, Any]:
    assert text.startswith("---\n")
    report = yaml.safe_load(text)
    machine = discover(root)
    assert list(report) == [
        "toolVersion",
        "layoutVersion",
        "sysfsRoot",
        "cpuDetails",
        "memory",
        "driverConfig",
    ]
    assert report["toolVersion"]["version"] == __version__
    assert report["layoutVersion"] == "v1"
    assert report["sysfsRoot"] == str(root)
    details = report["cpuDetails"]
    assert details["topology"] == machine.summary()
    assert details["cpus"] == machine.to_report_cpus()
    assert details["online"] == machine.online.format()
    assert details["fingerprint"] == machine.fingerprint
    assert report["memory"] == [node.to_report() for node in machine.memory]
    # The simulator reads the report back as the same machine.
    replayed = Machine.from_report(report)
    assert replayed.fingerprint == machine.fingerprint
    assert replayed.memory == machine.memory
    return dict(report)


@pytest.mark.parametrize("name", [n for n in FIXTURES if n != "big-1024"])
def test_stdout_report_on_every_fixture(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = write_fixture(name, tmp_path / "sys")
    assert gatherinfo.main(["--stdout", "--sysfs-root", str(root)]) == 0
    out = capsys.readouterr().out
    report = check_report(out, root)
    expected = DriverConfig.model_validate({"sysfsRoot": str(root)}).to_document()
    assert report["driverConfig"] == expected


def test_cpu_entries_carry_every_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = write_fixture("smt4", tmp_path / "sys")
    gatherinfo.main(["--stdout", "--sysfs-root", str(root)])
    cpu5 = yaml.safe_load(capsys.readouterr().out)["cpuDetails"]["cpus"][5]
    assert cpu5 == {
        "cpuID": 5,
        "coreID": 1,
        "socketID": 0,
        "clusterID": -1,
        "numaNodeID": 0,
        "numaNodeCPUSet": "0-31",
        "sibling": 4,
        "siblings": "4-7",
        "coreType": "standard",
        "uncoreCacheID": 0,
        "pcieRoots": [],
    }


def test_memory_entries_carry_every_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = write_fixture("numa4-hugepages", tmp_path / "sys")
    gatherinfo.main(["--stdout", "--sysfs-root", str(root)])
    memory = yaml.safe_load(capsys.readouterr().out)["memory"]
    assert [node["numaNodeID"] for node in memory] == [0, 1, 2, 3]
    assert memory[0] == {
        "numaNodeID": 0,
        "memTotalKiB": 16777216,
        "hugepages": [
            {"sizeKiB": 2048, "total": 512, "free": 500},
            {"sizeKiB": 1048576, "total": 2, "free": 2},
        ],
        "problems": [],
    }


def test_a_node_without_meminfo_is_reported_with_the_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = write_fixture("numa4-hugepages", tmp_path / "sys")
    (root / "devices/system/node/node1/meminfo").unlink()
    assert gatherinfo.main(["--stdout", "--sysfs-root", str(root)]) == 0
    node1 = yaml.safe_load(capsys.readouterr().out)["memory"][1]
    assert node1["memTotalKiB"] is None
    assert node1["problems"] == ["devices/system/node/node1/meminfo: missing"]


def test_report_on_this_machine() -> None:
    result = dracpu("gatherinfo", "--stdout")
    assert result.returncode == 0, result.stderr
    check_report(result.stdout, Path("/sys"))


def test_report_file_in_output_dir(tmp_path: Path) -> None:
    root = write_fixture("xeon-2s-ht", tmp_path / "sys")
    out = tmp_path / "reports" / "nested"
    result = dracpu("gatherinfo", "--sysfs-root", str(root), "--output-dir", str(out))
    assert result.returncode == 0, result.stderr
    path = Path(result.stdout.strip())
    assert path.parent == out
    assert REPORT_NAME.match(path.name)
    check_report(path.read_text(), root)


def test_report_file_defaults_to_the_current_directory(tmp_path: Path) -> None:
    root = write_fixture("small-vm", tmp_path / "sys")
    work = tmp_path / "work"
    work.mkdir()
    result = dracpu("gatherinfo", "--sysfs-root", str(root), cwd=work)
    assert result.returncode == 0, result.stderr
    path = Path(result.stdout.strip())
    assert path.parent == work
    assert [p.name for p in work.iterdir()] == [path.name]


def test_host_root_is_honoured(tmp_path: Path) -> None:
    write_fixture("intel-hybrid", tmp_path / "sys")
    result = dracpu("gatherinfo", "--stdout", env={"HOST_ROOT": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    check_report(result.stdout, tmp_path / "sys")


def test_config_file_and_flags_make_the_driver_config(tmp_path: Path) -> None:
    root = write_fixture("small-vm", tmp_path / "sys")
    config = tmp_path / "config.yaml"
    config.write_text("apiVersion: v1alpha1\ngroupBy: socket\nreservedCPUs: 1,0\n")
    result = dracpu(
        "gatherinfo",
        "--stdout",
        "--sysfs-root",
        str(root),
        "--config",
        str(config),
        "--cpu-device-mode",
        "individual",
    )
    assert result.returncode == 0, result.stderr
    driver = yaml.safe_load(result.stdout)["driverConfig"]
    assert driver["groupBy"] == "socket"
    assert driver["reservedCPUs"] == "0-1"
    assert driver["cpuDeviceMode"] == "individual"
    (warning,) = [line for line in klog_lines(result.stderr) if line.severity == "W"]
    assert warning.msg == "deprecated flag used"
    assert warning.values["flag"] == "--cpu-device-mode"


BAD_INPUT: dict[str, tuple[list[str], list[str]]] = {
    "stdout and output-dir together": (
        ["--stdout", "--output-dir", "/tmp"],
        ["--output-dir", "not allowed with", "--stdout"],
    ),
    "unknown flag": (["--bogus"], ["unrecognized arguments: --bogus"]),
    "nonexistent sysfs root": (
        ["--sysfs-root", "/nonexistent/sys"],
        ["sysfs root /nonexistent/sys does not exist"],
    ),
    "missing config file": (
        ["--config", "/nonexistent/config.yaml"],
        ["config file /nonexistent/config.yaml", "No such file"],
    ),
    "bad verbosity": (["-v", "99"], ["verbosity must be 0-10"]),
}


@pytest.mark.parametrize("args, fragments", list(BAD_INPUT.values()), ids=list(BAD_INPUT))
def test_bad_input_is_one_line_exit_2(args: list[str], fragments: list[str]) -> None:
    assert_one_line_error(dracpu("gatherinfo", *args), *fragments)


BAD_CONFIGS: dict[str, tuple[str, list[str]]] = {
    "unknown field": ("groupBy: socket\ncpuMode: grouped\n", ["unknown field 'cpuMode'"]),
    "wrong apiVersion": ("apiVersion: v2\n", ["'apiVersion'"]),
    "bad groupBy": ("groupBy: rack\n", ["'groupBy'"]),
    "malformed reservedCPUs": (
        "reservedCPUs: 0-3,,5\n",
        ["'reservedCPUs'", "empty item in CPU list '0-3,,5'"],
    ),
    "not YAML": ("groupBy: [socket\n", ["not valid YAML at line"]),
    "not a mapping": ("- a\n- b\n", ["expected a YAML mapping"]),
}


@pytest.mark.parametrize("content, fragments", list(BAD_CONFIGS.values()), ids=list(BAD_CONFIGS))
def test_bad_config_is_one_line_exit_2(content: str, fragments: list[str], tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(content)
    result = dracpu("gatherinfo", "--stdout", "--config", str(config))
    assert_one_line_error(result, f"config file {config}", *fragments)


def test_unwritable_output_dir_is_one_line_exit_2(tmp_path: Path) -> None:
    root = write_fixture("small-vm", tmp_path / "sys")
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = dracpu("gatherinfo", "--sysfs-root", str(root), "--output-dir", str(blocker / "x"))
    assert_one_line_error(result, f"cannot write report to {blocker / 'x'}")


def test_report_names_are_timestamped() -> None:
    assert gatherinfo.report_file_name(0, 42) == "dracpu-gatherinfo-19700101-000000-42.yaml"


def fake_driver(proc: Path, argv: list[str], pid: int = 1) -> None:
    (proc / str(pid)).mkdir(parents=True)
    (proc / str(pid) / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")


def test_in_the_pod_it_reports_the_configuration_the_driver_runs_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The pod's topology container: PID 1 is dracpu-topology (run by the venv's python),
    # with the chart's flags; `/dracpu gatherinfo --stdout` there is given no flag at all.
    root = write_fixture("xeon-2s-ht", tmp_path / "host" / "sys")
    config = tmp_path / "config.yaml"
    config.write_text("cpuDeviceMode: individual\nreservedCPUs: 0-1\n")
    command = ["--socket", "/run/dracpu/topology.sock", "--sysfs-root", str(root)]
    command += [f"--config={config}", "-v", "2", "--logging-format=text", "--group-by", "socket"]
    fake_driver(
        tmp_path / "proc", ["/opt/dracpu/bin/python", "/opt/dracpu/bin/dracpu-topology", *command]
    )
    monkeypatch.setattr(gatherinfo, "PROC", tmp_path / "proc")
    assert gatherinfo.main(["--stdout"]) == 0
    report = yaml.safe_load(capsys.readouterr().out)
    assert report["layoutVersion"] == "v1"
    assert report["sysfsRoot"] == str(root)
    assert report["driverConfig"]["cpuDeviceMode"] == "individual"
    assert report["driverConfig"]["reservedCPUs"] == "0-1"
    assert report["driverConfig"]["groupBy"] == "socket"  # the driver's flag, over its file
    assert report["driverConfig"]["sysfsRoot"] == str(root)
    assert report["driverCommandLine"] == command


def test_explicit_flags_or_no_driver_mean_no_driver_command_line(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    fake_driver(proc, ["/sbin/init", "--switched-root"])
    fake_driver(proc, ["dracpu-allocator", "--config=/etc/dracpu/config.yaml"], pid=7)
    assert gatherinfo.driver_command_line(proc) is None
    assert gatherinfo.driver_command_line(proc, pid=7) == ["--config=/etc/dracpu/config.yaml"]
    assert gatherinfo.driver_command_line(proc, pid=8) is None
    fake_driver(proc, ["dracpu-topology", "--sysfs-root", "/host/sys"], pid=9)
    parser = gatherinfo.build_parser()
    asked = parser.parse_args(["--stdout", "--sysfs-root", "/elsewhere"])
    assert gatherinfo.driver_config_args(asked, proc) == []
