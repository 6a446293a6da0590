"""Splits an OCI image layout archive holding several images (what `docker save` of Docker 25
or newer writes) into one archive per image, each itself an OCI image layout: `oci-layout`,
`index.json` naming the one image, and only the blobs that image references. Docker's
`manifest.json`, when present, is kept for the image too, so `docker load` takes the archive as
well as `ctr images import`, `skopeo copy oci-archive:...` and `syft`.

    tools/oci-archive.py split ARCHIVE OUTDIR NAME:TAG=FILE...

prints one line per image written: `<file> <manifest digest> <image>`. The archives are
reproducible: entries sorted, owner root, modification time zero.
"""

from __future__ import annotations

import io
import json
import sys
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

IMAGE_NAME = "io.containerd.image.name"
INDEX_MEDIA_TYPE = "application/vnd.oci.image.index.v1+json"


class ArchiveError(Exception):
    """The archive is not the OCI image layout expected, or lacks an image asked for."""


@dataclass(frozen=True)
class Written:
    path: Path
    digest: str  # the image manifest's, as a registry serves it
    image: str


def _blob_name(digest: str) -> str:
    algorithm, _, hex_digest = digest.partition(":")
    if not algorithm or not hex_digest or "/" in hex_digest:
        raise ArchiveError(f"malformed digest {digest!r}")
    return f"blobs/{algorithm}/{hex_digest}"


def _json(tar: tarfile.TarFile, name: str) -> Any:
    try:
        member = tar.extractfile(name)
    except KeyError:
        member = None
    if member is None:
        raise ArchiveError(f"{tar.name}: no {name} (not an OCI image layout)")
    return json.loads(member.read())


def _add_bytes(out: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o644
    out.addfile(info, io.BytesIO(data))


def _referenced(tar: tarfile.TarFile, manifest_digest: str) -> list[str]:
    """The blobs an image needs: its manifest, its config and its layers."""
    manifest = _json(tar, _blob_name(manifest_digest))
    if "config" not in manifest or "layers" not in manifest:
        raise ArchiveError(f"{manifest_digest} is not an image manifest (an index?)")
    layers = [layer["digest"] for layer in manifest["layers"]]
    return [manifest_digest, manifest["config"]["digest"], *layers]


def split(archive: Path, wanted: dict[str, Path]) -> list[Written]:
    """One archive per image of `wanted` (image name -> file), taken out of `archive`."""
    written = []
    with tarfile.open(archive) as tar:
        index = _json(tar, "index.json")
        by_name = {m.get("annotations", {}).get(IMAGE_NAME): m for m in index.get("manifests", [])}
        legacy = _legacy_manifest(tar)
        for image, path in wanted.items():
            entry = by_name.get(image)
            if entry is None:
                names = ", ".join(sorted(n for n in by_name if n)) or "none"
                raise ArchiveError(f"{archive}: no image {image} (it holds: {names})")
            blobs = _referenced(tar, entry["digest"])
            one_index = {"schemaVersion": 2, "mediaType": INDEX_MEDIA_TYPE, "manifests": [entry]}
            files: dict[str, bytes] = {
                "oci-layout": json.dumps({"imageLayoutVersion": "1.0.0"}).encode(),
                "index.json": json.dumps(one_index).encode(),
            }
            legacy_entries = [e for e in legacy if image in e.get("RepoTags", [])]
            if legacy_entries:
                files["manifest.json"] = json.dumps(legacy_entries).encode()
            _write(path, tar, files, blobs, legacy_entries)
            written.append(Written(path, entry["digest"], image))
    return written


def _legacy_manifest(tar: tarfile.TarFile) -> list[dict[str, Any]]:
    try:
        member = tar.extractfile("manifest.json")
    except KeyError:
        return []
    return list(json.loads(member.read())) if member is not None else []


def _write(
    path: Path,
    tar: tarfile.TarFile,
    files: dict[str, bytes],
    blobs: Iterable[str],
    legacy: list[dict[str, Any]],
) -> None:
    # Docker's manifest.json names the config and layers by path; they are blobs already.
    names = {_blob_name(d) for d in blobs}
    for entry in legacy:
        names.update([entry["Config"], *entry["Layers"]])
    partial = path.with_name(path.name + ".partial")
    with tarfile.open(partial, "w", format=tarfile.PAX_FORMAT) as out:
        for directory in sorted({str(Path(n).parent) for n in names} | {"blobs"}):
            info = tarfile.TarInfo(directory)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            out.addfile(info)
        for name in sorted(names):
            member = tar.getmember(name)
            source = tar.extractfile(member)
            if source is None:
                raise ArchiveError(f"{tar.name}: {name} is not a regular file")
            info = tarfile.TarInfo(name)
            info.size, info.mode = member.size, 0o644
            out.addfile(info, source)
        for name, data in sorted(files.items()):
            _add_bytes(out, name, data)
    partial.replace(path)


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[0] != "split" or not all("=" in a for a in argv[3:]):
        print("usage: oci-archive.py split ARCHIVE OUTDIR NAME:TAG=FILE...", file=sys.stderr)
        return 2
    archive, outdir = Path(argv[1]), Path(argv[2])
    wanted = {a.split("=", 1)[0]: outdir / a.split("=", 1)[1] for a in argv[3:]}
    try:
        for done in split(archive, wanted):
            print(f"{done.path.name} {done.digest} {done.image}")
    except (ArchiveError, OSError, tarfile.TarError, json.JSONDecodeError) as error:
        print(f"oci-archive: error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
