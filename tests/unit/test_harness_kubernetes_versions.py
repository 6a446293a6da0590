"""The tested Kubernetes releases (tools/kubernetes-versions) as the harness and the shell
scripts read them: one release per minor, oldest first, the newest the default; the release of
a run picked by DRACPU_KUBE_VERSION; the gates of each alike in Python and in bash; and the
table tools/compat.py writes from the checks' JUnit reports."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from harness.kubernetes_versions import (
    FILE,
    NEWEST,
    OLDEST,
    TESTED,
    Release,
    read_releases,
    selected,
)
from harness.tool_script import load_tool

ROOT = Path(__file__).resolve().parents[2]


def test_one_release_per_minor_oldest_first_from_1_34() -> None:
    minors = [tuple(int(n) for n in r.minor.split(".")) for r in TESTED]
    assert minors[0] == (1, 34)
    assert minors == [(1, m) for m in range(34, 34 + len(minors))]
    assert (TESTED[0], TESTED[-1]) == (OLDEST, NEWEST)


def test_consumable_capacity_is_turned_on_exactly_where_it_is_off_by_default() -> None:
    # alpha (off) in 1.34 and 1.35, beta and on from 1.36 (pkg/features/kube_features.go)
    for release in TESTED:
        wanted = "DRAConsumableCapacity=true" if release.minor in ("1.34", "1.35") else ""
        assert release.gates == wanted, release


def test_comments_blank_lines_and_a_dash_for_no_gates_are_read_as_written() -> None:
    text = "# version gates\n\nv1.40.1  A=true,B=false\nv1.41.0 -\nv1.42.0\n"
    assert read_releases(text) == (
        Release("v1.40.1", "A=true,B=false"),
        Release("v1.41.0", ""),
        Release("v1.42.0", ""),
    )


@pytest.mark.parametrize(
    ("value", "expected"),
    [("", NEWEST.version), (OLDEST.version, OLDEST.version), (OLDEST.minor, OLDEST.version)],
    ids=["unset", "a-version", "a-minor"],
)
def test_the_release_of_a_run_is_picked_by_version_or_minor(value: str, expected: str) -> None:
    assert selected({"DRACPU_KUBE_VERSION": value}).version == expected


def test_an_untested_release_is_refused_naming_the_tested_ones() -> None:
    with pytest.raises(ValueError, match=r"DRACPU_KUBE_VERSION=1\.20 is not a tested release \("):
        selected({"DRACPU_KUBE_VERSION": "1.20"})


def _bash(call: str) -> subprocess.CompletedProcess[str]:
    script = f"source {ROOT / 'tools' / 'kubernetes-versions.sh'} && {call}"
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True)


def test_the_shell_scripts_read_the_same_releases_and_gates() -> None:
    assert _bash("kube_versions").stdout.split() == [r.version for r in TESTED]
    assert _bash("kube_oldest").stdout.strip() == OLDEST.version
    assert _bash("kube_newest").stdout.strip() == NEWEST.version
    for release in TESTED:
        assert _bash(f"kube_gates {release.version}").stdout.strip() == release.gates


def test_the_shell_refuses_gates_of_an_untested_release_in_one_line() -> None:
    done = _bash("kube_gates v1.20.0")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"Kubernetes v1.20.0 is not in {FILE} ({' '.join(r.version for r in TESTED)})"
    ]


REPORT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
<testcase classname="controlplane.test_cp_slices" name="test_every_mode[numanode]"/>
<testcase classname="controlplane.test_cp_slices" name="test_every_mode[socket]"/>
<testcase classname="controlplane.test_cp_scheduling" name="test_capacity">
  <failure message="AssertionError: no allocation&#10;second line">trace</failure></testcase>
<testcase classname="controlplane.test_cp_admission" name="test_refused">
  <skipped message="helm not installed">...</skipped></testcase>
</testsuite></testsuites>
"""


def test_the_compat_table_counts_each_outcome_and_names_what_failed(tmp_path: Path) -> None:
    compat = load_tool("compat")
    report = tmp_path / "report.xml"
    report.write_text(REPORT, encoding="utf-8")
    failing = compat.Outcome(Release("v1.34.4", "DRAConsumableCapacity=true"), seconds=61.2)
    compat.read_report(failing, report)
    passing = compat.Outcome(Release("v1.37.2", ""), passed=9, seconds=40)
    assert (failing.passed, failing.verdict, passing.verdict) == (2, "fails", "passes")
    assert compat.table([failing, passing]).splitlines() == [
        "| Kubernetes | feature gates given | checks passed | failed | skipped | result |",
        "|---|---|---|---|---|---|",
        "| v1.34.4 | `DRAConsumableCapacity=true` | 2 | 1 | 1 | fails (61 s) |",
        "| v1.37.2 | none | 9 | 0 | 0 | passes (40 s) |",
        "",
        "- v1.34.4: test_cp_scheduling::test_capacity: AssertionError: no allocation",
        "- v1.34.4: test_cp_admission::test_refused: helm not installed",
    ]


def test_compat_refuses_an_untested_release_in_one_line() -> None:
    done = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "python"), str(ROOT / "tools" / "compat.py"), "1.20"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"compat: 1.20 is not a tested release ({', '.join(r.version for r in TESTED)})"
    ]
