"""Runs the compat checks (tests/controlplane, marker `compat`) on every tested Kubernetes
release of tools/kubernetes-versions, one release after the other, and writes their results as
a Markdown table to build/compat/results.md (printed too).

    .venv/bin/python tools/compat.py [RELEASE...] [-- PYTEST_ARGS...]
                                # RELEASE: 1.34 or v1.34.4; default every one

A release's binaries are built first when the cache lacks them (tools/build-kubernetes.sh:
kube-apiserver and kube-scheduler, the newest release whole). Each release's pytest output goes
to build/compat/<version>.log, its JUnit report beside it. Exit status 1 when a check failed
or was skipped on some release, 2 on a bad argument.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from harness.kubernetes_versions import NEWEST, TESTED, Release

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "build" / "compat"
OLDER_BINARIES = "kube-apiserver kube-scheduler"


@dataclass
class Outcome:
    release: Release
    passed: int = 0
    failed: list[str] = field(default_factory=list)  # "test id: first line of the failure"
    skipped: list[str] = field(default_factory=list)  # "test id: reason"
    seconds: float = 0.0
    error: str = ""  # the release could not be built or run

    @property
    def verdict(self) -> str:
        if self.error or self.failed:
            return "fails"
        return "skipped" if self.skipped or not self.passed else "passes"


def pick(names: list[str]) -> list[Release]:
    if not names:
        return list(TESTED)
    picked = []
    for name in names:
        bare = name.removeprefix("v")
        found = [r for r in TESTED if bare in (r.version.removeprefix("v"), r.minor)]
        if not found:
            known = ", ".join(r.version for r in TESTED)
            raise ValueError(f"{name} is not a tested release ({known})")
        picked.append(found[0])
    return picked


def build(release: Release, log: Path) -> str:
    """Builds what the cache lacks; "" or why it could not."""
    env = {**os.environ, "KUBE_VERSION": release.version}
    if release != NEWEST:
        env["KUBE_BINARIES"] = OLDER_BINARIES
    with log.open("w", encoding="utf-8") as out:
        done = subprocess.run(["bash", str(ROOT / "tools" / "build-kubernetes.sh"), "all"],
                              env=env, stdout=out, stderr=subprocess.STDOUT)  # fmt: skip
    return f"build failed (see {log})" if done.returncode else ""


def short(text: str) -> str:
    line = next((t.strip() for t in text.splitlines() if t.strip()), "")
    return line if len(line) <= 160 else line[:157] + "..."


def read_report(outcome: Outcome, report: Path) -> None:
    for case in ET.parse(report).getroot().iter("testcase"):
        name = f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name', '')}"
        failure = case.find("failure")
        if failure is None:
            failure = case.find("error")
        skipped = case.find("skipped")
        if failure is not None:
            outcome.failed.append(f"{name}: {short(failure.get('message') or '')}")
        elif skipped is not None:
            outcome.skipped.append(f"{name}: {short(skipped.get('message') or '')}")
        else:
            outcome.passed += 1


def run(release: Release, pytest_args: list[str]) -> Outcome:
    outcome = Outcome(release)
    began = time.monotonic()
    OUT.mkdir(parents=True, exist_ok=True)
    outcome.error = build(release, OUT / f"{release.version}-build.log")
    if not outcome.error:
        report, log = OUT / f"{release.version}.xml", OUT / f"{release.version}.log"
        report.unlink(missing_ok=True)
        env = {**os.environ, "DRACPU_KUBE_VERSION": release.version}
        command = [str(ROOT / ".venv" / "bin" / "pytest"), "-p", "no:cacheprovider", "-m",
                   "compat", "-rfEs", f"--junitxml={report}", *pytest_args,
                   str(ROOT / "tests" / "controlplane")]  # fmt: skip
        print(f"compat: Kubernetes {release.version}: {' '.join(command[1:])}", flush=True)
        with log.open("w", encoding="utf-8") as out:
            subprocess.run(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        if report.exists():
            read_report(outcome, report)
        else:
            outcome.error = f"pytest wrote no report (see {log})"
    outcome.seconds = time.monotonic() - began
    return outcome


def table(outcomes: list[Outcome]) -> str:
    lines = [
        "| Kubernetes | feature gates given | checks passed | failed | skipped | result |",
        "|---|---|---|---|---|---|",
    ]
    for o in outcomes:
        gates = f"`{o.release.gates}`" if o.release.gates else "none"
        lines.append(f"| {o.release.version} | {gates} | {o.passed} | {len(o.failed)} | "
                     f"{len(o.skipped)} | {o.verdict} ({o.seconds:.0f} s) |")  # fmt: skip
    notes = [
        f"- {o.release.version}: {what}"
        for o in outcomes
        for what in ([o.error] if o.error else []) + o.failed + o.skipped
    ]
    return "\n".join(lines + (["", *notes] if notes else [])) + "\n"


def main(argv: list[str]) -> int:
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__.strip())
        return 0
    names, pytest_args = argv, []
    if "--" in argv:
        names, pytest_args = argv[: argv.index("--")], argv[argv.index("--") + 1 :]
    try:
        releases = pick(names)
    except ValueError as exc:
        print(f"compat: {exc}", file=sys.stderr)
        return 2
    outcomes = []
    for release in releases:
        outcome = run(release, pytest_args)
        print(f"compat: Kubernetes {release.version}: {outcome.verdict}, {outcome.passed} "
              f"passed, {len(outcome.failed)} failed, {len(outcome.skipped)} skipped",
              flush=True)  # fmt: skip
        outcomes.append(outcome)
    text = table(outcomes)
    (OUT / "results.md").write_text(text, encoding="utf-8")
    print(f"\ncompat: results (also in {OUT / 'results.md'}):\n\n{text}")
    return 0 if all(o.verdict == "passes" for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
