"""`dracpu simulate` as a user runs it: a separate process reading a topology file.

Placements are checked against the kubelet's own expectations (kubelet_cases/) and against
`take_cpus` itself, since the command must give exactly the service's answer.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from dracpu.allocator.algorithm import Policy, take_cpus
from dracpu.core.cpuset import CPUSet
from dracpu.core.machine import Machine

TOPOLOGIES = Path(__file__).parent / "kubelet_cases" / "topologies"
XEON_4NUMA = str(TOPOLOGIES / "topoDualSocketMultiNumaPerSocketHT.json")
DUAL_HT = str(TOPOLOGIES / "topoDualSocketHT.json")
UNCORE_SMT = str(TOPOLOGIES / "topoUncoreSingleSocketSMT.json")


def simulate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dracpu.core.cli", "simulate", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("args", "expect"),
    [
        # kubelet: "take a NUMA node of cpus from dual socket with multi-numa-per-socket with HT"
        pytest.param(["--topology", XEON_4NUMA, "--count", "20"], "0-9,40-49", id="numa-node"),
        # kubelet: "... a core taken" (the first physical core reserved)
        pytest.param(
            ["--topology", XEON_4NUMA, "--count", "60", "--reserved", "0,40"],
            "10-39,50-79",
            id="reserved-core",
        ),
        # kubelet spread table: "take a socket of cpus from dual socket with HT, 3 cpus"
        pytest.param(
            ["--topology", DUAL_HT, "--count", "3", "--strategy", "spread"],
            "0,2,4",
            id="spread",
        ),
        # kubelet uncore table: "take cpus from multiple UncoreCache of single socket - SMT"
        pytest.param(
            ["--topology", UNCORE_SMT, "--count", "10", "--available", "1-7,9-15"],
            "1,4-7,9,12-15",
            id="uncore-aligned",
        ),
        # kubelet distributed table: "allocate 13 full cores ... (cpuGroupSize 2)"
        pytest.param(
            ["--topology", XEON_4NUMA, "--count", "26", "--distribute-numa", "--group-size", "2"],
            "0-6,10-15,40-46,50-55",
            id="distributed-groups",
        ),
        # kubelet static policy: "GuPodManyCores, topoDualSocketHT, ExpectAllocAllCPUs"
        pytest.param(
            ["--topology", DUAL_HT, "--count", "10", "--reserved", "0,6", "--full-pcpus-only"],
            "1-5,7-11",
            id="full-pcpus",
        ),
    ],
)
def test_prints_the_kubelet_placement(args: list[str], expect: str) -> None:
    done = simulate(*args)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == expect + "\n"


def test_json_names_the_numa_nodes_sockets_and_caches() -> None:
    done = simulate("--topology", XEON_4NUMA, "--count", "60", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "cpus": "0-29,40-69",
        "numaNodes": [0, 1, 2],
        "sockets": [0, 1],
        "uncoreCaches": [0],
        "memoryNodes": "",  # memory not placed: every node
    }


def test_local_memory_placement_shows_the_nodes_the_container_would_get() -> None:
    """60 CPUs of a machine of 4 NUMA nodes span 3 of them: its memory would too."""
    common = ["--topology", XEON_4NUMA, "--count", "60", "--memory-placement", "local"]
    done = simulate(*common, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["memoryNodes"] == "0-2"
    done = simulate(*common)
    assert done.stdout == "0-29,40-69\nmemory nodes 0-2\n"
    one = simulate("--topology", XEON_4NUMA, "--count", "4", "--memory-placement", "local")
    assert one.stdout.splitlines()[1] == "memory nodes 0"


def test_no_align_uncore_changes_the_uncore_placement() -> None:
    common = ["--topology", UNCORE_SMT, "--count", "6", "--available", "2-7,10-15"]
    aligned = simulate(*common)
    plain = simulate(*common, "--no-align-uncore")
    # kubelet: "take cpus from best available UncoreCache group ... - SMT enabled"
    assert aligned.stdout == "4-6,12-14\n"
    machine = Machine.from_report(json.loads(Path(UNCORE_SMT).read_text()))
    expect = take_cpus(machine, CPUSet.parse("2-7,10-15"), 6, Policy(align_uncore=False))
    assert plain.stdout == expect.format() + "\n"


@pytest.fixture(scope="module")
def gatherinfo_report() -> Iterator[Path]:
    """A real report: the EPYC NPS4 sysfs fixture read by `dracpu gatherinfo`."""
    root = Path(tempfile.mkdtemp(dir="/tmp", prefix="sim"))
    subprocess.run(
        [sys.executable, "-m", "dracpu.topology.fixtures", "epyc-2s-nps4", str(root / "sys")],
        check=True,
        capture_output=True,
    )
    report = subprocess.run(
        [
            sys.executable,
            "-m",
            "dracpu.core.cli",
            "gatherinfo",
            "--stdout",
            "--sysfs-root",
            str(root / "sys"),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    path = root / "report.yaml"
    path.write_text(report.stdout)
    yield path


def test_reads_a_gatherinfo_report_and_agrees_with_the_service_code(
    gatherinfo_report: Path,
) -> None:
    args = ["--count", "12", "--reserved", "0,128", "--available", "0-63,128-191"]
    done = simulate("--topology", str(gatherinfo_report), *args, "--json")
    assert done.returncode == 0, done.stderr
    import yaml

    machine = Machine.from_report(yaml.safe_load(gatherinfo_report.read_text()))
    expect = take_cpus(machine, CPUSet.parse("1-63,129-191"), 12)
    shown = json.loads(done.stdout)
    assert shown["cpus"] == expect.format()
    assert shown["numaNodes"] == sorted({machine.by_id[c].numa_node_id for c in expect})


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            ["--topology", DUAL_HT, "--count", "13"],
            "dracpu simulate: not enough CPUs available: want 13, 12 free (0-11)",
            id="too-many",
        ),
        pytest.param(
            ["--topology", DUAL_HT, "--count", "10", "--available", "0,2-10", "--full-pcpus-only"],
            "dracpu simulate: not enough whole physical cores available: want 10 CPUs (5 cores), "
            "8 CPUs are free in whole cores; 10 free (0,2-10)",
            id="whole-cores",
        ),
        pytest.param(
            ["--topology", DUAL_HT, "--count", "3", "--full-pcpus-only"],
            "dracpu simulate: cannot place 3 CPUs on whole physical cores: each core has 2 threads",
            id="not-whole-cores",
        ),
    ],
)
def test_unmet_request_is_one_line_and_exit_1(args: list[str], message: str) -> None:
    done = simulate(*args)
    assert (done.returncode, done.stdout, done.stderr) == (1, "", message + "\n")


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            ["--topology", DUAL_HT], "the following arguments are required: --count", id="no-count"
        ),
        pytest.param(
            ["--topology", DUAL_HT, "--count", "two"], "invalid int value: 'two'", id="count-nan"
        ),
        pytest.param(
            ["--topology", DUAL_HT, "--count", "0"],
            "CPU count must be positive, got 0",
            id="count-0",
        ),
        pytest.param(
            ["--topology", DUAL_HT, "--count", "2", "--strategy", "diagonal"],
            "argument --strategy: invalid choice",
            id="strategy",
        ),
        pytest.param(
            ["--topology", DUAL_HT, "--count", "2", "--group-size", "2"],
            "--group-size: only applies with --distribute-numa",
            id="group-size-alone",
        ),
        pytest.param(
            ["--topology", DUAL_HT, "--count", "2", "--distribute-numa", "--group-size", "0"],
            "CPU group size must be positive, got 0",
            id="group-size-0",
        ),
        pytest.param(
            ["--topology", DUAL_HT, "--count", "2", "--available", "3-1"],
            "--available: reversed range '3-1'",
            id="bad-cpuset",
        ),
        pytest.param(
            ["--topology", DUAL_HT, "--count", "2", "--reserved", "12-13"],
            "--reserved: CPUs 12-13 are not in the topology",
            id="unknown-cpus",
        ),
        pytest.param(
            ["--topology", DUAL_HT, "--count", "2", "--strategy", "spread", "--full-pcpus-only"],
            "cannot be combined",
            id="spread-full-pcpus",
        ),
        pytest.param(
            ["--topology", DUAL_HT, "--count", "2", "--memory-placement", "strict"],
            "argument --memory-placement: invalid choice: 'strict'",
            id="memory-placement",
        ),
        pytest.param(
            ["--topology", "/nonexistent/t.yaml", "--count", "2"],
            "cannot read topology",
            id="no-file",
        ),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(args: list[str], message: str) -> None:
    done = simulate(*args)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1 and message in done.stderr
    assert done.stderr.startswith("dracpu simulate: error: ")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param("cpus: [", "is neither YAML nor JSON at line 1", id="not-yaml"),
        pytest.param("{}", "no `cpus` list", id="no-cpus"),
        pytest.param('{"cpus": [{"cpuID": 0}]}', "cpus[0]: missing coreID", id="incomplete-cpu"),
        pytest.param(
            "---\ncpus: [{cpuID: 0, coreID: 0, socketID: 0}]\n---\ncpus: []\n",
            "holds 2 documents; give one node's report",
            id="two-reports",
        ),
    ],
)
def test_bad_topology_files_are_one_line_and_exit_2(
    tmp_path: Path, content: str, message: str
) -> None:
    done = simulate("--topology", write(tmp_path, "topology.yaml", content), "--count", "1")
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and message in done.stderr


# ---- memory with the CPUs --------------------------------------------------------------------


@pytest.fixture(scope="module")
def hugepages_report() -> Iterator[str]:
    """`dracpu gatherinfo` of numa4-hugepages: 4 NUMA nodes of 8 CPUs (node 0: CPUs 0-3,16-19;
    node 2: 8-11,24-27). Node 0 publishes 13Gi of memory, 1Gi of 2 MiB pages and 2Gi of 1 GiB
    pages; node 2's 2 MiB pool is empty."""
    root = Path(tempfile.mkdtemp(dir="/tmp", prefix="simmem"))
    subprocess.run(
        [sys.executable, "-m", "dracpu.topology.fixtures", "numa4-hugepages", str(root / "sys")],
        check=True,
        capture_output=True,
    )
    report = subprocess.run(
        [sys.executable, "-m", "dracpu.core.cli", "gatherinfo", "--stdout",
         "--sysfs-root", str(root / "sys")],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    path = root / "report.yaml"
    path.write_text(report.stdout)
    yield str(path)


def test_memory_comes_from_the_node_of_the_cpus_and_is_checked_against_its_device(
    hugepages_report: str,
) -> None:
    args = ["--topology", hugepages_report, "--count", "4", "--memory", "1Gi"]
    done = simulate(*args, "--hugepages", "2Mi=64Mi")
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == (
        "0-1,16-17\nmemory from NUMA node 0: hugepages-2Mi 64Mi of 1Gi, memory 1Gi of 13Gi "
        "published\n"
    )
    shown = json.loads(simulate(*args, "--hugepages", "1Gi=2Gi", "--json").stdout)
    assert shown["memoryNodes"] == "0"  # the node its memory devices gave
    assert shown["memory"] == {
        "numaNode": 0,
        "amounts": [
            {"kind": "hugepages-1Gi", "bytes": 2 << 30, "published": 2 << 30},
            {"kind": "memory", "bytes": 1 << 30, "published": 13 << 30},
        ],
    }


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            ["--count", "4", "--hugepages", "1Gi=3Gi"],
            "NUMA node 0 hugepages-1Gi: wants 3Gi, 2Gi free",
            id="past-the-pool",
        ),
        pytest.param(
            ["--count", "4", "--available", "8-11,24-27", "--hugepages", "2Mi=2Mi"],
            "NUMA node 2 hugepages-2Mi: wants 2Mi, 0 free",
            id="empty-pool",
        ),
        pytest.param(
            ["--count", "4", "--hugepages", "64Ki=64Ki"],
            "NUMA node 0 hugepages-64Ki: wants 64Ki, 0 free",
            id="no-such-pool",
        ),
        pytest.param(
            ["--count", "12", "--memory", "1Gi"],
            "the CPUs 0-5,16-21 lie on NUMA nodes 0-1: memory comes from the one NUMA node of "
            "the claim's CPUs; ask for fewer CPUs or give --available",
            id="cpus-on-two-nodes",
        ),
    ],
)
def test_memory_the_node_does_not_publish_is_one_line_and_exit_1(
    hugepages_report: str, args: list[str], message: str
) -> None:
    done = simulate("--topology", hugepages_report, *args)
    assert (done.returncode, done.stdout, done.stderr) == (1, "", f"dracpu simulate: {message}\n")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            ["--memory", "0"],
            "--memory: must be a positive whole number of bytes, got 0",
            id="memory-0",
        ),
        pytest.param(
            ["--memory", "1.5"],
            "--memory: must be a positive whole number of bytes, got 1.5",
            id="memory-fraction",
        ),
        pytest.param(["--memory", "lots"], "--memory: 'lots' is not a quantity", id="memory-nan"),
        pytest.param(
            ["--hugepages", "2Mi"],
            "--hugepages 2Mi: expected SIZE=QUANTITY, e.g. 2Mi=64Mi",
            id="no-amount",
        ),
        pytest.param(
            ["--hugepages", "2M=64Mi"],
            "--hugepages 2M=64Mi: page size 2M is not a power of two of at least 4Ki",
            id="decimal-size",
        ),
        pytest.param(
            ["--hugepages", "2Mi=3Mi"],
            "--hugepages 2Mi=3Mi: 3Mi is not a whole number of 2Mi pages",
            id="part-page",
        ),
        pytest.param(
            ["--hugepages", "2Mi=2Mi", "--hugepages", "2Mi=4Mi"],
            "--hugepages: page size 2Mi is given twice",
            id="twice",
        ),
        pytest.param(
            ["--topology", DUAL_HT, "--memory", "1Gi"],
            "the topology lists no NUMA node memory: a gatherinfo report of a release with "
            "memory devices lists each node's memory",
            id="report-without-memory",
        ),
    ],
)
def test_a_bad_memory_request_is_one_line_and_exit_2(
    hugepages_report: str, args: list[str], message: str
) -> None:
    topology = [] if "--topology" in args else ["--topology", hugepages_report]
    done = simulate(*topology, "--count", "4", *args)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == f"dracpu simulate: error: {message}\n"
