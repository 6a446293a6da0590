"""The numbered steps of a section of a docs page, and their `sh` blocks run as written.

A step is a list item `N. **Title**...`; its commands are the lines of the `sh` code blocks
under it (continuations joined). A test runs them in bash with what the page's generic words
stand for on the cluster at hand (`substitutions`: `<node>` -> its node, a host path -> the
cluster's) and a preamble of shell functions standing in for what the cluster lacks (systemd).
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping
from pathlib import Path

from harness.cluster import Cluster, step


def numbered_steps(page: Path, heading: str) -> list[tuple[str, list[str]]]:
    """(title, command lines) of each numbered step of the section `heading` (`## ...`)."""
    text = page.read_text(encoding="utf-8")
    assert heading in text, f"{page.name} has no section {heading!r}"
    section = text.split(heading, 1)[1].split("\n## ", 1)[0]
    steps: list[tuple[str, list[str]]] = []
    block: str | None = None
    pending = ""
    for line in section.splitlines():
        stripped = line.strip()
        heading_match = re.match(r"^\d+\. \*\*([^*]+)\*\*", line)
        if heading_match and block is None:
            steps.append((heading_match.group(1), []))
        elif stripped.startswith("```") and block is None:
            block = stripped[3:]
        elif stripped == "```":
            block = None
        elif block == "sh" and steps and stripped:
            pending += stripped
            if pending.endswith("\\"):
                pending = pending[:-1] + " "
                continue
            steps[-1][1].append(pending)
            pending = ""
    return steps


def run_step(
    commands: list[str],
    *,
    env: Mapping[str, str],
    substitutions: Mapping[str, str],
    preamble: str = "",
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """The step's command lines in one bash, `set -euo pipefail`, each generic word replaced."""
    lines = []
    for command in commands:
        for generic, actual in substitutions.items():
            command = command.replace(generic, actual)
        lines.append(command)
    script = "\n".join([preamble, "set -euo pipefail", *lines])
    done = subprocess.run(["bash", "-c", script], env=dict(env), capture_output=True,
                          text=True, timeout=600, check=False)  # fmt: skip
    if check:
        assert done.returncode == 0, (
            f"{'; '.join(lines)}: exit {done.returncode}: {done.stderr.strip()}"
        )
    return done


class Section:
    """The numbered steps of one section of a page, run by title on a cluster of
    tools/cluster.sh as its operator would: in bash, with the cluster's `helm` and `kubectl`
    first on PATH and its kubeconfig, each generic word replaced (`substitutions`)."""

    def __init__(
        self, page: Path, heading: str, cluster: Cluster, substitutions: Mapping[str, str]
    ) -> None:
        self.steps = dict(numbered_steps(page, heading))
        self.substitutions = dict(substitutions)
        tools = f"{Path(cluster.helm_bin).parent}:{Path(cluster.kubectl_bin).parent}"
        self.env = {
            **os.environ,
            "PATH": f"{tools}:{os.environ['PATH']}",
            "KUBECONFIG": cluster.kubeconfig,
        }

    def run(self, title: str, check: bool = True) -> str:
        """The step's output; unchecked, `exit <n>: <stderr>` whatever the exit."""
        with step(f"page step: {title}"):
            done = run_step(
                self.steps[title], env=self.env, substitutions=self.substitutions, check=check
            )
        if check:
            return done.stdout + done.stderr
        return f"exit {done.returncode}: {done.stderr}"

    def script(self, title: str) -> str:
        """The step's commands as one script, each generic word replaced (to run elsewhere)."""
        lines = []
        for command in self.steps[title]:
            for generic, actual in self.substitutions.items():
                command = command.replace(generic, actual)
            lines.append(command)
        return "\n".join(["set -eu", *lines])
