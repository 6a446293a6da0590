"""The release version is written once, in pyproject.toml's `[project] version`. What must
repeat it (helm reads the chart's version from Chart.yaml; a hand-run `docker build` and docker
compose need a default tag) says the same, and the installed package reports it."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

import dracpu.core

ROOT = Path(__file__).resolve().parents[2]
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def _copies() -> dict[str, list[str]]:
    chart = yaml.safe_load((ROOT / "helm/dra-driver-cpu/Chart.yaml").read_text())
    dockerfile = (ROOT / "Dockerfile").read_text()
    compose = (ROOT / "compose/docker-compose.yaml").read_text()
    return {
        "Chart.yaml version": [str(chart["version"])],
        "Chart.yaml appVersion": [str(chart["appVersion"])],
        "Dockerfile ARG VERSION": re.findall(r"^ARG VERSION=(\S+)$", dockerfile, re.MULTILINE),
        "compose's default tags": re.findall(r"_VERSION:-([^}]+)\}", compose),
    }


@pytest.mark.parametrize("where", sorted(_copies()))
def test_every_copy_of_the_version_is_pyprojects(where: str) -> None:
    found = _copies()[where]
    assert found, f"{where}: no version found"
    assert set(found) == {VERSION}, f"{where} says {found}; pyproject.toml says {VERSION}"


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
