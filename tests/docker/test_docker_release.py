"""`make release` (tools/release.sh) on the docker tier's images writes a release an operator
can install from, each part read back by the tool an operator would use: `sha256sum -c`
accepts SHA256SUMS, skopeo reads five OCI archives of the five services at the release's
version, each SBOM is CycloneDX listing the image's dracpu wheel and Debian packages, helm reads
the packaged chart's version, and the notes are CHANGELOG.md's section of the version."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from harness.docker_engine import ROOT, TIER
from harness.release_dist import SERVICES, Dist, make_release
from tiers import require_command, require_root

pytestmark = [pytest.mark.docker, pytest.mark.timeout(3600)]

VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


@pytest.fixture(scope="module")
def dist() -> Dist:
    require_root("docker")
    check = subprocess.run(["bash", str(TIER), "check"], capture_output=True, text=True)
    if check.returncode != 0:
        pytest.skip(f"docker tier: {check.stdout.strip()}")
    return make_release()


def _run(*argv: str, cwd: Path | None = None) -> str:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"{' '.join(argv)}: {done.stderr.strip()}"
    return done.stdout


def test_sha256sum_accepts_the_checksums_of_every_file(dist: Dist) -> None:
    checked = _run("sha256sum", "-c", "SHA256SUMS", cwd=dist.folder).splitlines()
    files = sorted(
        p.name for p in dist.folder.iterdir() if p.name != "SHA256SUMS" and p.name[0] != "."
    )
    assert sorted(line.removesuffix(": OK") for line in checked) == files
    assert all(line.endswith(": OK") for line in checked), checked


def test_five_image_archives_skopeo_reads_at_the_release_version(dist: Dist) -> None:
    require_command("docker", "skopeo")
    assert dist.version == VERSION
    assert [i.archive.name for i in dist.images] == [
        f"dracpu-{svc}-{VERSION}.oci.tar" for svc in SERVICES
    ]
    for svc, image in zip(SERVICES, dist.images, strict=True):
        assert image.name == f"localhost/dracpu-{svc}:{VERSION}"
        seen = json.loads(_run("skopeo", "inspect", f"oci-archive:{image.archive}"))
        assert seen["Digest"] == image.digest
        assert seen["Labels"]["io.dracpu.service"] == svc
        assert seen["Labels"]["org.opencontainers.image.version"] == VERSION


def _purls(sbom: dict[str, Any]) -> list[str]:
    return [c.get("purl", "") for c in sbom.get("components", [])]


@pytest.mark.parametrize("service", SERVICES)
def test_each_sbom_lists_the_dracpu_wheel_and_the_debian_packages(dist: Dist, service: str) -> None:
    sbom = json.loads(dist.sbom(service).read_text())
    assert sbom["bomFormat"] == "CycloneDX"
    purls = _purls(sbom)
    assert f"pkg:pypi/dra-driver-cpu@{VERSION}" in purls, [p for p in purls if "pypi" in p]
    assert any(p.startswith("pkg:pypi/grpcio@") for p in purls)
    debian = [p for p in purls if p.startswith("pkg:deb/debian/")]
    assert any(p.startswith("pkg:deb/debian/libc6@") for p in debian), debian[:20]
    assert any(p.startswith("pkg:deb/debian/python3.11@") for p in debian), debian[:20]


def test_helm_reads_the_packaged_charts_version(dist: Dist) -> None:
    """appVersion the release's (the images' tag), version its Semantic Versioning spelling."""
    helm = ROOT / ".tools/bin/helm"
    chart = yaml.safe_load(_run(str(helm), "show", "chart", str(dist.chart)))
    semver = _run(sys.executable, str(ROOT / "tools/chart-version.py"), VERSION).strip()
    assert (chart["version"], chart["appVersion"]) == (semver, VERSION)
    assert dist.chart.name == f"dra-driver-cpu-{semver}.tgz"


def test_the_notes_are_the_changelogs_section_of_the_version(dist: Dist) -> None:
    notes = dist.notes.read_text()
    assert notes.startswith(f"## [{VERSION}]")
    changelog = (ROOT / "CHANGELOG.md").read_text()
    body = notes.split("\n", 1)[1].strip()
    assert body and body in changelog
