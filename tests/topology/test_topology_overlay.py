"""The sysfs overlay (`sysfsOverlay` / `--sysfs-overlay`): the reference driver's file format
and semantics, and its example overlay (a synthetic two-node, four-CPU machine)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dracpu.core.errors import ConfigError
from dracpu.topology.discovery import CPU_DIR, discover
from dracpu.topology.fixtures import write_fixture
from dracpu.topology.overlay import SysfsOverlay, parse, read
from dracpu.topology.sysfs import SysfsReader

# The reference's example overlay (hack/examples/sysfs-overlay/configmap.yaml): CPUs 0-1 on
# NUMA node 0 and socket 0, 2-3 on node 1 and socket 1, SMT off, one L3 per node, and one
# PCIe root local to each node.
REFERENCE_EXAMPLE = r"""
/sys/devices/system/cpu/online: "0-3\n"
/sys/devices/system/cpu/smt/control: "off\n"
/sys/devices/pci0000:00/pci_bus/0000:00/cpulistaffinity: "0-1\n"
/sys/devices/pci0001:80/pci_bus/0001:80/cpulistaffinity: "2-3\n"
/sys/devices/system/node/node0/cpulist: "0-1\n"
/sys/devices/system/node/node1/cpulist: "2-3\n"
""" + "".join(
    f'/sys/devices/system/cpu/cpu{cpu}/node{cpu // 2}: ""\n'
    f'/sys/devices/system/cpu/cpu{cpu}/topology/physical_package_id: "{cpu // 2}\\n"\n'
    f'/sys/devices/system/cpu/cpu{cpu}/topology/core_id: "{cpu % 2}\\n"\n'
    f'/sys/devices/system/cpu/cpu{cpu}/topology/cluster_id: "0\\n"\n'
    f'/sys/devices/system/cpu/cpu{cpu}/cache/index3/level: "3\\n"\n'
    f'/sys/devices/system/cpu/cpu{cpu}/cache/index3/id: "{cpu // 2}\\n"\n'
    f"/sys/devices/system/cpu/cpu{cpu}/cache/index3/shared_cpu_list: "
    f'"{cpu // 2 * 2}-{cpu // 2 * 2 + 1}\\n"\n'
    for cpu in range(4)
)


GATHERINFO = (sys.executable, "-m", "dracpu.core.cli", "gatherinfo", "--stdout")


def check_reference_example(root: Path, *, only_its_roots: bool = True) -> None:
    machine = discover(root, parse(REFERENCE_EXAMPLE, "example"))
    assert machine.online.format() == "0-3"
    assert machine.smt_control == "off"
    assert machine.summary() == {
        "numCPUs": 4,
        "numCores": 4,
        "numUncoreCache": 2,
        "numSockets": 2,
        "numNUMANodes": 2,
        "smtEnabled": False,
    }
    cpus = {cpu["cpuID"]: cpu for cpu in machine.to_report_cpus()}
    for cpu, node in ((0, 0), (1, 0), (2, 1), (3, 1)):
        assert cpus[cpu]["numaNodeID"] == node
        assert cpus[cpu]["socketID"] == node
        assert cpus[cpu]["numaNodeCPUSet"] == ("0-1" if node == 0 else "2-3")
        root_of_node = "pci0000:00" if node == 0 else "pci0001:80"
        if only_its_roots:
            assert cpus[cpu]["pcieRoots"] == [root_of_node]
        else:  # a real machine's other PCIe roots stay, as the overlay leaves them
            assert root_of_node in cpus[cpu]["pcieRoots"]


@pytest.mark.parametrize("fixture", ["single-4c8t", "small-vm"])
def test_the_reference_example_over_a_fixture(fixture: str, tmp_path: Path) -> None:
    # Whatever the real tree says, the overlay's machine is what discovery sees: the real
    # CPU 2's node entry is hidden by the overlay's, and the real CPUs past 3 are offline.
    check_reference_example(write_fixture(fixture, tmp_path / "sys"))


@pytest.mark.skipif(not os.path.isdir("/sys/devices/system/cpu"), reason="no sysfs here")
def test_the_reference_example_over_this_machines_sysfs() -> None:
    check_reference_example(Path("/sys"), only_its_roots=False)


def test_values_are_file_contents_and_the_rest_reads_the_real_tree(tmp_path: Path) -> None:
    root = write_fixture("single-4c8t", tmp_path / "sys")
    overlay = parse(
        '/sys/devices/system/cpu/online: "0-1\\n"\n'
        "/sys/devices/system/cpu/smt/control: |\n  off\n"
        "/sys/devices/system/cpu/virtual/value: virtual\n",
        "t",
    )
    assert overlay.files["devices/system/cpu/online"] == b"0-1\n"
    assert overlay.files["devices/system/cpu/smt/control"] == b"off\n"
    reader = SysfsReader(root, overlay)
    assert reader.text(f"{CPU_DIR}/online") == "0-1"
    assert reader.text(f"{CPU_DIR}/cpu0/topology/core_id") == "0"  # the real file
    assert reader.is_dir(f"{CPU_DIR}/virtual") and not reader.is_dir(f"{CPU_DIR}/online")
    listing = reader.listdir(CPU_DIR)
    assert not isinstance(listing, type(reader.text("nothing")))
    assert "virtual" in listing and "cpu0" in listing and "online" in listing
    assert listing == sorted(set(listing))
    assert str(reader.text(f"{CPU_DIR}/virtual")).endswith("Is a directory")
    assert str(reader.listdir(f"{CPU_DIR}/online")).endswith("Not a directory")
    assert discover(root, overlay).online.format() == "0-1"


def test_an_overlay_node_entry_hides_the_cpus_real_node(tmp_path: Path) -> None:
    root = write_fixture("single-4c8t", tmp_path / "sys")
    assert "node0" in os.listdir(root / CPU_DIR / "cpu2")
    reader = SysfsReader(root, parse('/sys/devices/system/cpu/cpu2/node1: ""\n', "t"))
    entries = reader.listdir(f"{CPU_DIR}/cpu2")
    assert isinstance(entries, list)
    assert "node1" in entries and "node0" not in entries and "topology" in entries
    # Only that CPU's directory is masked.
    assert "node0" in reader.listdir(f"{CPU_DIR}/cpu1")  # type: ignore[operator]


def test_no_overlay_and_an_empty_file_change_nothing(tmp_path: Path) -> None:
    root = write_fixture("single-4c8t", tmp_path / "sys")
    (tmp_path / "empty.yaml").write_text("")
    assert not read("") and not read(str(tmp_path / "empty.yaml"))
    assert discover(root, read("")).fingerprint == discover(root).fingerprint
    assert discover(root, SysfsOverlay()).fingerprint == discover(root).fingerprint


@pytest.mark.parametrize(
    ("text", "error"),
    [
        (
            "/sys/devices/system/cpu/online: 1\n",
            "value for '/sys/devices/system/cpu/online' must be a string",
        ),
        ("- value\n", "expected a YAML mapping of paths to contents"),
        ("devices/value: value\n", "path 'devices/value' must be beneath /sys"),
        ("/proc/value: value\n", "path '/proc/value' must be beneath /sys"),
        ("/sys: value\n", "path '/sys' must be beneath /sys"),
        ("/sys/devices/../value: value\n", "path '/sys/devices/../value' is not clean"),
        ("/sys/devices//value: value\n", "is not clean"),
        ("/sys/devices/value/: value\n", "is not clean"),
        (
            "/sys/devices: file\n/sys/devices/value: value\n",
            "'/sys/devices' is both a file and a directory",
        ),
        (
            '/sys/devices/system/cpu/cpu0/node0: ""\n/sys/devices/system/cpu/cpu0/node1: ""\n',
            "several NUMA nodes beneath /sys/devices/system/cpu/cpu0: node0, node1",
        ),
        ("/sys/a: x\n/sys/a: y\n", "duplicate path '/sys/a'"),
        ("/sys/a: [x\n", "not valid YAML at line"),
    ],
)
def test_a_bad_overlay_is_refused_naming_the_entry(text: str, error: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse(text, "sysfs overlay f.yaml")
    message = str(caught.value)
    assert message.startswith("sysfs overlay f.yaml: ") and error in message
    assert "\n" not in message


def test_a_missing_overlay_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^sysfs overlay .*/none.yaml: No such file"):
        read(str(tmp_path / "none.yaml"))


def test_gatherinfo_reports_the_overlaid_machine(tmp_path: Path) -> None:
    root = write_fixture("xeon-2s-ht", tmp_path / "sys")
    overlay = tmp_path / "sysfs-overlay.yaml"
    overlay.write_text(REFERENCE_EXAMPLE)
    config = tmp_path / "config.yaml"
    config.write_text(f"sysfsOverlay: {overlay}\n")
    result = subprocess.run(
        [*GATHERINFO, "--sysfs-root", str(root), f"--config={config}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    report = yaml.safe_load(result.stdout)
    assert report["cpuDetails"]["topology"]["numNUMANodes"] == 2
    assert report["cpuDetails"]["online"] == "0-3"
    assert report["driverConfig"]["sysfsOverlay"] == str(overlay)


def test_the_flag_wins_over_the_file_and_a_bad_overlay_is_one_line(tmp_path: Path) -> None:
    root = write_fixture("single-4c8t", tmp_path / "sys")
    bad = tmp_path / "bad.yaml"
    bad.write_text("/proc/x: y\n")
    result = subprocess.run(
        [*GATHERINFO, "--sysfs-root", str(root), "--sysfs-overlay", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0 and result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert f"sysfs overlay {bad}: path '/proc/x' must be beneath /sys" in line
