"""The placement algorithm compiled by mypyc answers exactly as its Python source does, and
only a build of the very sources in the tree is ever run.

The other tests hold the Python modules to the kubelet (tests/conftest.py runs them as Python,
since a compiled module ignores a test's patches); here the compiled build (made by
`make venv`, tools/compile-algorithm.py) faces the same kubelet tables and a few hundred
machines shaped like the benchmark's, in a process of its own, and must give the same CPUs or
fail the same way on every one.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import sysconfig
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from dracpu.allocator.algorithm import Policy, compiled, take_cpus
from dracpu.core.cpuset import CPUSet
from dracpu.core.errors import InsufficientCPUsError
from dracpu.core.machine import CPUInfo, Machine

CASES_DIR = Path(__file__).parent / "kubelet_cases"
TABLES = ("packed", "spread", "distributed", "grouped", "staticPolicy")

# Reads cases as JSON lines on stdin and writes each one's answer; the first line says which
# variant ran.
ANSWER = """
import json, sys
from dracpu.allocator.algorithm import VARIANT, Policy, take_cpus
from dracpu.core.cpuset import CPUSet
from dracpu.core.errors import InsufficientCPUsError
from dracpu.core.machine import CPUInfo, Machine
print(VARIANT)
machines = {}
for line in sys.stdin:
    case = json.loads(line)
    key = case["machine"]
    if key not in machines:
        machines[key] = Machine.build([CPUInfo(*cpu) for cpu in json.loads(key)])
    try:
        got = take_cpus(machines[key], CPUSet.parse(case["free"]), case["count"],
                        Policy(**case["policy"])).format()
    except InsufficientCPUsError as exc:
        got = "error: " + str(exc)
    print(got, flush=True)
"""


def machine_key(machine: Machine) -> str:
    return json.dumps(
        [
            [c.cpu_id, c.core_id, c.socket_id, c.numa_node_id, c.uncore_cache_id]
            for c in machine.cpus
        ]
    )


def kubelet_cases() -> list[dict[str, Any]]:
    """Every case of the kubelet tables that asks for CPUs."""
    cases = []
    for path in sorted(CASES_DIR.glob("*_cases.json")):
        document = json.loads(path.read_text())
        for table in TABLES:
            for case in document.get(table, []):
                if case["count"] <= 0:
                    continue
                topology = CASES_DIR / "topologies" / f"{case['topology']}.json"
                machine = Machine.from_report(json.loads(topology.read_text()), case["topology"])
                policy = {
                    "strategy": case["strategy"],
                    "align_uncore": case["alignUncore"],
                    "distribute_numa": case.get("distributeNUMA", False),
                    "group_size": case.get("groupSize", 1),
                    "full_pcpus_only": case.get("fullPCPUsOnly", False),
                }
                cases.append(
                    {
                        "machine": machine_key(machine),
                        "free": case["available"],
                        "count": case["count"],
                        "policy": policy,
                    }
                )
    return cases


def wide_machine(numa_nodes: int) -> Machine:
    """1,024 CPUs in two sockets, siblings at cpu + 512, four uncore caches per NUMA node."""
    cores, per_numa = 512, 512 // numa_nodes
    return Machine.build(
        [
            CPUInfo(
                cpu_id=core + thread * cores,
                core_id=core % 256,
                socket_id=core // 256,
                numa_node_id=core // per_numa,
                uncore_cache_id=core // max(per_numa // 4, 1),
            )
            for core in range(cores)
            for thread in range(2)
        ]
    )


def wide_cases(rng: random.Random, per_shape: int) -> list[dict[str, Any]]:
    """Fragmented states of 8, 16 and 32 NUMA nodes, most nearly exhausted, for every
    strategy, in groups of 1, 2 or 4."""
    cases = []
    for numa_nodes in (8, 16, 32):
        machine = wide_machine(numa_nodes)
        key = machine_key(machine)
        numa_of = {cpu.cpu_id: cpu.numa_node_id for cpu in machine.cpus}
        for _ in range(per_shape):
            floor = rng.uniform(0.3, 0.95)
            busy = {n: rng.uniform(floor, 1.0) for n in machine.numa_nodes}
            free = [cpu for cpu in machine.cpu_set.sorted() if rng.random() >= busy[numa_of[cpu]]]
            if not free:
                continue
            group = rng.choice((1, 2, 4))
            count = rng.choice((2, 4, 16, 64, 100, 256, rng.randint(1, len(free))))
            policy = rng.choice(
                (
                    {"strategy": "packed"},
                    {"strategy": "spread"},
                    {"strategy": "packed", "align_uncore": True},
                    {"distribute_numa": True, "group_size": group},
                    {"distribute_numa": True, "group_size": group, "strategy": "spread"},
                )
            )
            if policy.get("distribute_numa"):
                count = max(group, count // group * group)
            cases.append(
                {"machine": key, "free": CPUSet(free).format(), "count": count, "policy": policy}
            )
    return cases


@cache
def machine_of(key: str) -> Machine:
    return Machine.build([CPUInfo(*cpu) for cpu in json.loads(key)])


def python_answer(case: dict[str, Any]) -> str:
    machine = machine_of(case["machine"])
    try:
        return take_cpus(
            machine, CPUSet.parse(case["free"]), case["count"], Policy(**case["policy"])
        ).format()
    except InsufficientCPUsError as exc:
        return "error: " + str(exc)


def c_compiler_here() -> bool:
    """mypyc needs a C compiler and the interpreter's headers."""
    include = Path(sysconfig.get_paths()["include"]) / "Python.h"
    return shutil.which("cc") is not None and include.is_file()


def compiled_environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "DRACPU_PURE_PYTHON"}


@pytest.fixture(scope="module")
def build() -> Path:
    os.environ.pop("DRACPU_PURE_PYTHON", None)
    try:
        found = compiled.native_path()
    finally:
        os.environ["DRACPU_PURE_PYTHON"] = "1"
    if found is None:
        if not c_compiler_here():
            pytest.skip("no C compiler or Python headers here: the algorithm runs as Python")
        pytest.fail("no compiled build of these sources: `make venv` (tools/compile-algorithm.py)")
    return found


def test_the_compiled_build_takes_what_the_python_source_takes(build: Path) -> None:
    cases = kubelet_cases() + wide_cases(random.Random(7), per_shape=120)
    lines = "".join(json.dumps(case) + "\n" for case in cases)
    done = subprocess.run(
        [sys.executable, "-c", ANSWER],
        input=lines,
        capture_output=True,
        text=True,
        env=compiled_environment(),
        check=True,
    )
    variant, *answers = done.stdout.splitlines()
    assert variant.startswith("compiled by mypyc"), variant
    assert len(cases) > 350
    for case, answer in zip(cases, answers, strict=True):
        assert answer == python_answer(case), case


def fake_build(sources: Path, root: Path, leave_out: str = "") -> Path:
    """A build folder for `sources` holding an (empty) file for each library."""
    folder = compiled.package_dir(compiled.build_dir(sources, root))
    folder.mkdir(parents=True)
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    for name in (f"{compiled.GROUP}__mypyc", *compiled.COMPILED):
        if name != leave_out:
            (folder / f"{name}{suffix}").touch()
    return folder


@pytest.fixture
def sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    copy = tmp_path / "sources"
    copy.mkdir()
    for name in compiled.COMPILED:
        shutil.copy(compiled.SOURCES / f"{name}.py", copy)
    monkeypatch.delenv("DRACPU_PURE_PYTHON")
    return copy


def test_a_build_of_the_same_sources_is_used(sources: Path, tmp_path: Path) -> None:
    folder = fake_build(sources, tmp_path / "cache")
    assert compiled.native_path(sources, tmp_path / "cache") == folder


def test_an_edited_source_never_runs_an_older_build(sources: Path, tmp_path: Path) -> None:
    fake_build(sources, tmp_path / "cache")
    edited = sources / "numa_plan.py"
    edited.write_text(edited.read_text() + "\n# edited\n")
    assert compiled.native_path(sources, tmp_path / "cache") is None


def test_a_build_missing_a_module_is_not_used(sources: Path, tmp_path: Path) -> None:
    fake_build(sources, tmp_path / "cache", leave_out="remainder")
    assert compiled.native_path(sources, tmp_path / "cache") is None


def test_pure_python_is_chosen_on_request(
    sources: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_build(sources, tmp_path / "cache")
    monkeypatch.setenv("DRACPU_PURE_PYTHON", "1")
    assert compiled.native_path(sources, tmp_path / "cache") is None
