"""A release as `make release` writes it into dist/ (tools/release.sh), read back the way an
operator would use it: the packaged chart, the image archives and their digests
(`images.txt`), the SBOMs and the notes. `make_release` runs the tool (a no-op when dist/
already holds the release of the same inputs); `PushRegistry` is a local registry
(the CNCF Distribution registry, Debian's docker-registry) to push the archives to."""

from __future__ import annotations

import shutil
import ssl
import subprocess
import tarfile
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from harness.dev_up import free_port
from harness.pki import make_pki
from harness.waits import wait_for

ROOT = Path(__file__).resolve().parents[2]
DIST = ROOT / "dist"
SERVICES = ("topology", "allocator", "dra-plugin", "nri-plugin", "api")


@dataclass(frozen=True)
class ReleaseImage:
    name: str  # as the node's runtime knows it, e.g. localhost/dracpu-api:0.2.0
    digest: str  # the manifest's
    archive: Path


@dataclass(frozen=True)
class Dist:
    folder: Path
    version: str  # the release's (the chart's appVersion, the images' tag)
    chart: Path
    images: tuple[ReleaseImage, ...]

    @property
    def archives(self) -> list[Path]:
        return [image.archive for image in self.images]

    def sbom(self, service: str) -> Path:
        return self.folder / f"dracpu-{service}-{self.version}.cdx.json"

    @property
    def notes(self) -> Path:
        return self.folder / "RELEASE-NOTES.md"


def chart_metadata(package: Path) -> dict[str, Any]:
    """A packaged chart's Chart.yaml (`version`, `appVersion`, ...)."""
    with tarfile.open(package) as tar:
        member = tar.extractfile("dra-driver-cpu/Chart.yaml")
        assert member is not None, f"{package}: no dra-driver-cpu/Chart.yaml"
        metadata: dict[str, Any] = yaml.safe_load(member.read())
    return metadata


def read_dist(folder: Path = DIST) -> Dist:
    """The release in `folder`: one chart package, and the images `images.txt` lists."""
    charts = sorted(folder.glob("dra-driver-cpu-*.tgz"))
    assert len(charts) == 1, f"{folder}: expected one chart package, found {charts}"
    version = str(chart_metadata(charts[0])["appVersion"])
    images = []
    for line in (folder / "images.txt").read_text(encoding="utf-8").splitlines():
        name, digest, archive = line.split()
        images.append(ReleaseImage(name, digest, folder / archive))
    return Dist(folder, version, charts[0], tuple(images))


def make_release(folder: Path = DIST, timeout: float = 3600, tree: Path = ROOT) -> Dist:
    """`tools/release.sh folder` of the checkout `tree` (this one, or an earlier release's
    source), its progress lines passed through; the release it wrote."""
    done = subprocess.run(
        ["bash", str(tree / "tools/release.sh"), str(folder)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout, check=False,
    )  # fmt: skip
    print(done.stdout, end="", flush=True)
    tail = done.stdout[-3000:]
    assert done.returncode == 0, f"tools/release.sh failed ({done.returncode}): {tail}"
    return read_dist(folder)


def registry_binary() -> Path | None:
    """Debian's CNCF Distribution registry (`docker-registry`, installed by the e2e tier's
    bootstrap), when it is installed."""
    found = shutil.which("docker-registry")
    return Path(found) if found else None


@dataclass(frozen=True)
class PushRegistry:
    """A registry on 127.0.0.1:`port` over TLS with a certificate of a throwaway authority:
    `env` makes a client (skopeo, any Go program) trust it, as a registry's own CA would be."""

    port: int
    ca: Path

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        return {"SSL_CERT_FILE": str(self.ca)}


def _answers(url: str, context: ssl.SSLContext) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5, context=context) as reply:
            return bool(reply.status == 200)
    except (urllib.error.URLError, OSError):
        return False


@contextmanager
def push_registry(binary: Path) -> Iterator[PushRegistry]:
    """The registry serving from a temporary folder, until the block ends."""
    with tempfile.TemporaryDirectory(prefix="dracpu-registry-") as folder:
        base = Path(folder)
        pki = make_pki(base / "pki")
        port = free_port()
        (base / "config.yml").write_text(
            "version: 0.1\n"
            f"storage:\n  filesystem:\n    rootdirectory: {base / 'data'}\n"
            f"http:\n  addr: 127.0.0.1:{port}\n"
            f"  tls:\n    certificate: {pki.path('server-ip.crt')}\n"
            f"    key: {pki.path('server-ip.key')}\n"
            "log:\n  level: warn\n",
            encoding="utf-8",
        )
        context = ssl.create_default_context(cafile=pki.path("ca.crt"))
        with (base / "registry.log").open("w") as log:
            process = subprocess.Popen(
                [str(binary), "serve", str(base / "config.yml")], stdout=log, stderr=log
            )
        try:
            wait_for(
                lambda: (
                    process.poll() is not None or _answers(f"https://127.0.0.1:{port}/v2/", context)
                ),
                "the registry answering /v2/",
                timeout=60,
            )
            assert process.poll() is None, (base / "registry.log").read_text()
            yield PushRegistry(port, pki.path("ca.crt"))
        finally:
            process.terminate()
            process.wait(timeout=30)
