"""The allocator's inventory sources other than the topology service: a gatherinfo report
(YAML, as `dracpu gatherinfo` writes it) or a JSON document with a `cpus` list."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from dracpu.allocator.rpc.topology_client import load_file
from dracpu.core.errors import InvalidInputError
from dracpu.core.machine import Machine
from dracpu.topology.fixtures import write_fixture

Machines = Callable[[str], Machine]


def test_a_gatherinfo_report_gives_the_discovered_machine(
    tmp_path: Path, machines: Machines
) -> None:
    sysfs = write_fixture("epyc-2s-nps4", tmp_path / "sys")
    report = subprocess.run(
        [
            sys.executable,
            "-m",
            "dracpu.core.cli",
            "gatherinfo",
            "--sysfs-root",
            str(sysfs),
            "--stdout",
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    assert report.startswith("---")
    (tmp_path / "report.yaml").write_text(report)
    loaded = load_file(str(tmp_path / "report.yaml"))
    assert loaded.cpus == machines("epyc-2s-nps4").cpus


def test_a_json_cpus_document(tmp_path: Path, machines: Machines) -> None:
    machine = machines("xeon-2s-ht")
    path = tmp_path / "cpus.json"
    path.write_text(json.dumps({"cpus": machine.to_report_cpus()}))
    assert load_file(str(path)).cpus == machine.cpus


@pytest.mark.parametrize(
    ("content", "message"),
    [(None, "No such file"), ("cpus: [", "not valid YAML"), ("{}", "no `cpus` list")],
    ids=["missing", "garbage", "no-cpus"],
)
def test_bad_sources_are_refused(tmp_path: Path, content: str | None, message: str) -> None:
    path = tmp_path / "topology.yaml"
    if content is not None:
        path.write_text(content)
    with pytest.raises(InvalidInputError, match=message):
        load_file(str(path))
