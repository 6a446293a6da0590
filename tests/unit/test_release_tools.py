"""The pieces of `make release` that need no engine: tools/oci-archive.py splits a multi-image
OCI layout archive (what `docker save` writes) into one archive per image, each holding just
that image's blobs; tools/release-notes.py prints one version's CHANGELOG section and refuses,
in one line, a version without one. The whole release (images, SBOMs, checksums) is held in the
docker tier (tests/docker/test_docker_release.py)."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from harness.tool_script import load_tool

TOOLS = Path(__file__).resolve().parents[2] / "tools"
ROOT = TOOLS.parent


def _blob(files: dict[str, bytes], data: bytes) -> str:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    files[f"blobs/sha256/{digest[7:]}"] = data
    return digest


def _layout(path: Path, images: dict[str, list[bytes]]) -> dict[str, str]:
    """An OCI layout archive as docker save writes it (index + manifest.json); image name ->
    manifest digest. Images given the same layer bytes share that blob."""
    files: dict[str, bytes] = {"oci-layout": b'{"imageLayoutVersion": "1.0.0"}'}
    index, legacy, digests = [], [], {}
    for name, layers in images.items():
        layer_digests = [_blob(files, layer) for layer in layers]
        config = _blob(files, json.dumps({"name": name}).encode())
        manifest = {
            "schemaVersion": 2,
            "config": {"digest": config, "size": 1},
            "layers": [{"digest": d, "size": 1} for d in layer_digests],
        }
        digests[name] = _blob(files, json.dumps(manifest).encode())
        names = {"io.containerd.image.name": name, "org.opencontainers.image.ref.name": "1"}
        index.append({"digest": digests[name], "annotations": names})
        legacy.append({
            "Config": f"blobs/sha256/{config[7:]}",
            "RepoTags": [name],
            "Layers": [f"blobs/sha256/{d[7:]}" for d in layer_digests],
        })  # fmt: skip
    files["index.json"] = json.dumps({"schemaVersion": 2, "manifests": index}).encode()
    files["manifest.json"] = json.dumps(legacy).encode()
    with tarfile.open(path, "w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return digests


def _members(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as tar:
        return {
            m.name: tar.extractfile(m).read()  # type: ignore[union-attr]
            for m in tar.getmembers()
            if m.isfile()
        }


def test_each_image_gets_an_archive_of_its_own_blobs_and_nothing_else(tmp_path: Path) -> None:
    oci = load_tool("oci-archive")
    digests = _layout(
        tmp_path / "all.tar",
        {"localhost/a:1": [b"base", b"a-only"], "localhost/b:1": [b"base", b"b-only"]},
    )
    written = oci.split(tmp_path / "all.tar", {"localhost/a:1": tmp_path / "a.oci.tar"})
    assert [(w.image, w.digest) for w in written] == [("localhost/a:1", digests["localhost/a:1"])]
    members = _members(tmp_path / "a.oci.tar")
    index = json.loads(members["index.json"])
    assert [m["digest"] for m in index["manifests"]] == [digests["localhost/a:1"]]
    assert index["manifests"][0]["annotations"]["io.containerd.image.name"] == "localhost/a:1"
    blobs = {name: data for name, data in members.items() if name.startswith("blobs/")}
    assert b"base" in blobs.values() and b"a-only" in blobs.values()
    assert b"b-only" not in blobs.values()
    for name, data in blobs.items():  # every blob is named by its content
        assert name == f"blobs/sha256/{hashlib.sha256(data).hexdigest()}"
    (legacy,) = json.loads(members["manifest.json"])
    assert legacy["RepoTags"] == ["localhost/a:1"]
    assert all(layer in members for layer in legacy["Layers"])


def test_splitting_twice_writes_the_same_bytes(tmp_path: Path) -> None:
    oci = load_tool("oci-archive")
    _layout(tmp_path / "all.tar", {"localhost/a:1": [b"x", b"y"]})
    oci.split(tmp_path / "all.tar", {"localhost/a:1": tmp_path / "one.tar"})
    oci.split(tmp_path / "all.tar", {"localhost/a:1": tmp_path / "two.tar"})
    assert (tmp_path / "one.tar").read_bytes() == (tmp_path / "two.tar").read_bytes()


def test_an_image_the_archive_lacks_is_one_error_line_naming_what_it_holds(tmp_path: Path) -> None:
    _layout(tmp_path / "all.tar", {"localhost/a:1": [b"x"]})
    done = subprocess.run(
        [sys.executable, str(TOOLS / "oci-archive.py"), "split", str(tmp_path / "all.tar"),
         str(tmp_path), "localhost/z:1=z.tar"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    archive = tmp_path / "all.tar"
    assert done.stderr.strip().splitlines() == [
        f"oci-archive: error: {archive}: no image localhost/z:1 (it holds: localhost/a:1)"
    ]
    assert not (tmp_path / "z.tar").exists()


def test_a_file_that_is_no_oci_layout_is_one_error_line(tmp_path: Path) -> None:
    with tarfile.open(tmp_path / "plain.tar", "w"):
        pass
    done = subprocess.run(
        [sys.executable, str(TOOLS / "oci-archive.py"), "split", str(tmp_path / "plain.tar"),
         str(tmp_path), "localhost/a:1=a.tar"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "no index.json (not an OCI image layout)" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


CHANGELOG = """# Changelog

Intro.

## [Unreleased]

- Next thing.

## [1.1.0] - unreleased

### Added

- New thing.

## [1.0.0] - 2026-01-01

- First.

## [0.9.0] - 2025-12-01

[1.1.0]: https://example.com/compare/v1.0.0...v1.1.0
"""


@pytest.mark.parametrize(
    "version, notes",
    [
        ("1.1.0", "## [1.1.0] - unreleased\n\n### Added\n\n- New thing.\n"),
        ("1.0.0", "## [1.0.0] - 2026-01-01\n\n- First.\n"),
        ("1.2.0.dev0", "## [1.2.0.dev0] - unreleased\n\n- Next thing.\n"),
    ],
    ids=[
        "newest-up-to-the-next-heading",
        "older-up-to-the-next-heading",
        "a-development-version-has-the-unreleased-notes",
    ],
)
def test_release_notes_are_the_versions_section(version: str, notes: str) -> None:
    assert load_tool("release-notes").section(CHANGELOG, version) == notes


@pytest.mark.parametrize(
    "version, message",
    [
        ("2.0.0", "no section '## [2.0.0]' (it has: Unreleased, 1.1.0, 1.0.0, 0.9.0)"),
        ("0.9.0", "the section '## [0.9.0]' is empty"),
    ],
    ids=["missing", "empty"],
)
def test_a_version_without_notes_is_refused(version: str, message: str, tmp_path: Path) -> None:
    (tmp_path / "CHANGELOG.md").write_text(CHANGELOG)
    done = subprocess.run(
        [sys.executable, str(TOOLS / "release-notes.py"), version, str(tmp_path / "CHANGELOG.md")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip() == f"release-notes: error: {tmp_path / 'CHANGELOG.md'}: {message}"


def test_the_changelog_has_notes_for_the_version_being_released() -> None:
    version = subprocess.run(
        ["bash", "-c", f"source {TOOLS / 'lib.sh'}; project_version"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    notes = load_tool("release-notes").section((ROOT / "CHANGELOG.md").read_text(), version)
    assert notes.startswith(f"## [{version}]")
    assert "### " in notes
