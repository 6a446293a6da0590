"""The release version is written once, in pyproject.toml's `[project] version`. What must
repeat it (helm reads the chart's version from Chart.yaml; a hand-run `docker build` and docker
compose need a default tag) says the same, the chart's version in Semantic Versioning
(tools/chart-version.py), and the installed package reports it."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from harness.tool_script import load_tool

import dracpu.core

ROOT = Path(__file__).resolve().parents[2]
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


CHART_TOOL = load_tool("chart-version")
CHART_VERSION = CHART_TOOL.chart_version(VERSION)


def _copies() -> dict[str, tuple[list[str], str]]:
    """Where the version is repeated: what it says there, and what it must say."""
    chart = yaml.safe_load((ROOT / "helm/dra-driver-cpu/Chart.yaml").read_text())
    dockerfile = (ROOT / "Dockerfile").read_text()
    compose = (ROOT / "compose/docker-compose.yaml").read_text()
    return {
        "Chart.yaml version": ([str(chart["version"])], CHART_VERSION),
        "Chart.yaml appVersion": ([str(chart["appVersion"])], VERSION),
        "Dockerfile ARG VERSION": (
            re.findall(r"^ARG VERSION=(\S+)$", dockerfile, re.MULTILINE),
            VERSION,
        ),
        "compose's default tags": (re.findall(r"_VERSION:-([^}]+)\}", compose), VERSION),
    }


@pytest.mark.parametrize("where", sorted(_copies()))
def test_every_copy_of_the_version_is_pyprojects(where: str) -> None:
    found, wanted = _copies()[where]
    assert found, f"{where}: no version found"
    assert set(found) == {wanted}, f"{where} says {found}; pyproject.toml says {VERSION}"


@pytest.mark.parametrize(
    "version, chart",
    [("0.2.0", "0.2.0"), ("0.3.0rc1", "0.3.0-rc.1"), ("0.3.0.dev0", "0.3.0-dev.0"),
     ("1.10.2.dev12", "1.10.2-dev.12")],
)  # fmt: skip
def test_the_charts_version_is_the_release_in_semantic_versioning(version: str, chart: str) -> None:
    assert CHART_TOOL.chart_version(version) == chart


@pytest.mark.parametrize("version", ["0.3.0a1", "0.3.0rc1.dev2", "0.3.0.post1", "0.3.0+local",
                                     "1.0"])  # fmt: skip
def test_a_version_the_chart_cannot_order_alike_is_one_error_line(version: str) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools/chart-version.py"), version],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.startswith("chart-version: error: ") and done.stderr.count("\n") == 1


def test_the_installed_package_reports_pyprojects_version() -> None:
    assert dracpu.core.__version__ == VERSION


def test_the_version_is_read_without_importlib_metadata() -> None:
    """importlib.metadata (email, zipfile, csv) would stay in every service's memory."""
    done = subprocess.run(
        [sys.executable, "-c", "import sys, dracpu.core; print(sorted(sys.modules))"],
        capture_output=True,
        text=True,
        check=True,
    )
    loaded = done.stdout
    assert "'importlib.metadata'" not in loaded and "'email'" not in loaded, loaded
