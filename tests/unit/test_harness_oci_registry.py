"""The loopback registry CRI-O pulls the project's images from (tests/harness/oci_registry.py,
also run by tools/cluster.sh): every image of an OCI archive served by the name its index gives,
blobs read from the archive, a one-image archive under any name, and the program's address
file."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
import tarfile
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from harness.oci_registry import MANIFEST, ArchiveRegistry
from harness.waits import wait_for

HERE = Path(__file__).resolve().parents[1] / "harness" / "oci_registry.py"


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _archive(path: Path, images: dict[str, bytes]) -> dict[str, tuple[str, str]]:
    """An OCI archive of one layer per image; name -> (manifest digest, layer digest)."""
    blobs: dict[str, bytes] = {}
    entries = []
    made = {}
    for name, layer in images.items():
        config = json.dumps({"architecture": "amd64", "os": "linux", "name": name}).encode()
        manifest = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": MANIFEST,
                "config": {
                    "mediaType": "application/vnd.oci.image.config.v1+json",
                    "digest": _digest(config),
                    "size": len(config),
                },
                "layers": [
                    {
                        "mediaType": "application/vnd.oci.image.layer.v1.tar",
                        "digest": _digest(layer),
                        "size": len(layer),
                    }
                ],
            }
        ).encode()
        for blob in (config, layer, manifest):
            blobs[_digest(blob)] = blob
        entries.append(
            {
                "mediaType": MANIFEST,
                "digest": _digest(manifest),
                "size": len(manifest),
                "annotations": {"io.containerd.image.name": name},
            }
        )
        made[name] = (_digest(manifest), _digest(layer))
    index = json.dumps({"schemaVersion": 2, "manifests": entries}).encode()
    with tarfile.open(path, "w") as tar:
        for member, data in [("index.json", index)] + [
            (f"blobs/sha256/{d.split(':')[1]}", b) for d, b in blobs.items()
        ]:
            info = tarfile.TarInfo(member)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return made


def _get(url: str) -> tuple[int, bytes, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as reply:
            return reply.status, reply.read(), reply.headers.get("Docker-Content-Digest", "")
    except urllib.error.HTTPError as exc:
        return exc.code, b"", ""


def test_every_image_of_two_archives_is_served_by_its_name(tmp_path: Path) -> None:
    driver = _archive(
        tmp_path / "driver.tar",
        {"localhost/dracpu-api:0.2.0": b"api layer", "localhost/dracpu-topology:0.2.0": b"topo"},
    )
    sandbox = _archive(tmp_path / "sandbox.tar", {"localhost/dracpu-realnode:1": b"pause"})
    registry = ArchiveRegistry(tmp_path / "driver.tar", tmp_path / "sandbox.tar")
    registry.start()
    try:
        base = f"http://{registry.address}/v2"
        assert registry.names == [*driver, *sandbox]
        assert _get(f"{base}/")[0] == 200
        for name, (manifest, layer) in {**driver, **sandbox}.items():
            repository, tag = name.removeprefix("localhost/").rsplit(":", 1)
            status, body, digest = _get(f"{base}/{repository}/manifests/{tag}")
            assert (status, _digest(body), digest) == (200, manifest, manifest)
            assert _get(f"{base}/{repository}/manifests/{manifest}")[0] == 200
            status, body, _ = _get(f"{base}/{repository}/blobs/{layer}")
            assert (status, _digest(body)) == (200, layer)
        # Several images: a name the archives do not hold is not served.
        assert _get(f"{base}/dracpu-api/manifests/0.3.0")[0] == 404
        assert _get(f"{base}/busybox/manifests/1.36")[0] == 404
        assert _get(f"{base}/dracpu-api/blobs/sha256:{'0' * 64}")[0] == 404
    finally:
        registry.stop()


def test_an_archive_of_one_image_is_served_under_any_name(tmp_path: Path) -> None:
    ((manifest, _),) = _archive(
        tmp_path / "one.tar", {"localhost/dracpu-realnode:1": b"x"}
    ).values()
    registry = ArchiveRegistry(tmp_path / "one.tar")
    registry.start()
    try:
        status, _, digest = _get(f"http://{registry.address}/v2/other/name/manifests/latest")
        assert (status, digest) == (200, manifest)
    finally:
        registry.stop()


def test_a_manifest_that_does_not_match_its_digest_is_refused(tmp_path: Path) -> None:
    ((manifest, _),) = _archive(tmp_path / "bad.tar", {"localhost/x:1": b"x"}).values()
    with tarfile.open(tmp_path / "bad.tar") as tar:
        members = [(m, tar.extractfile(m)) for m in tar.getmembers()]
        files = {m.name: f.read() for m, f in members if f is not None}
    files[f"blobs/sha256/{manifest.split(':')[1]}"] += b" "
    with tarfile.open(tmp_path / "bad.tar", "w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    with pytest.raises(ValueError, match="does not match its digest"):
        ArchiveRegistry(tmp_path / "bad.tar")


def announced(out: Path, process: subprocess.Popen[bytes]) -> list[str]:
    """The lines the program writes to `out` once it serves (its address, then its names)."""
    wait_for(
        lambda: out.exists() or process.poll() is not None,
        f"the registry's address in {out}",
        timeout=30,
        interval=0.05,
    )
    return out.read_text().splitlines()


def test_the_program_writes_its_address_and_names_then_serves_until_terminated(
    tmp_path: Path,
) -> None:
    _archive(tmp_path / "a.tar", {"localhost/dracpu-api:0.2.0": b"a"})
    out = tmp_path / "address"
    process = subprocess.Popen([sys.executable, str(HERE), str(out), str(tmp_path / "a.tar")])
    try:
        address, *names = announced(out, process)
        assert names == ["localhost/dracpu-api:0.2.0"]
        assert _get(f"http://{address}/v2/dracpu-api/manifests/0.2.0")[0] == 200
    finally:
        process.terminate()
        assert process.wait(timeout=30) == 0


def test_an_alias_serves_an_image_under_a_new_name_on_the_port_asked(tmp_path: Path) -> None:
    made = _archive(tmp_path / "a.tar", {"localhost/dracpu-api:0.2.0": b"a", "localhost/b:1": b"b"})
    manifest, _ = made["localhost/dracpu-api:0.2.0"]
    out = tmp_path / "address"
    process = subprocess.Popen(
        [sys.executable, str(HERE), "--port", "0", "--alias",
         "localhost/dracpu-api:0.2.0=docker.io/library/busybox:1.36", str(out),
         str(tmp_path / "a.tar")]
    )  # fmt: skip
    try:
        address, *names = announced(out, process)
        assert names[-1] == "docker.io/library/busybox:1.36"
        status, _, digest = _get(f"http://{address}/v2/library/busybox/manifests/1.36")
        assert (status, digest) == (200, manifest)
    finally:
        process.terminate()
        assert process.wait(timeout=30) == 0
    registry = ArchiveRegistry(tmp_path / "a.tar")
    with pytest.raises(ValueError, match="no image localhost/c:1"):
        registry.alias("localhost/c:1", "localhost/d:1")
    registry.stop()
