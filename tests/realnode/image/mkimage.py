"""Write an OCI image archive (one layer: static busybox + /pause) that `ctr images import` reads.

usage: mkimage.py OUT.tar --pause PATH --busybox PATH [--name NAME]

Deterministic: fixed mtimes and owners, so the same inputs give the same digests.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import tarfile
from pathlib import Path

IMAGE_NAME = "localhost/dracpu-realnode:1"
APPLETS = ("sh", "sleep", "cat", "env", "grep", "ls", "ps", "nproc", "echo", "true", "taskset")
DIRS = ("bin", "dev", "etc", "proc", "sys", "tmp", "run", "root", "var")


def _add(
    tar: tarfile.TarFile,
    name: str,
    data: bytes | None = None,
    *,
    mode: int = 0o755,
    link: str = "",
    directory: bool = False,
) -> None:
    info = tarfile.TarInfo(name)
    info.mtime = 0
    info.mode = mode
    if directory:
        info.type = tarfile.DIRTYPE
        tar.addfile(info)
    elif link:
        info.type = tarfile.SYMTYPE
        info.linkname = link
        info.mode = 0o777
        tar.addfile(info)
    else:
        assert data is not None
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def build(out: Path, pause: Path, busybox: Path, name: str) -> str:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as layer:
        for directory in DIRS:
            _add(layer, directory, directory=True)
        _add(layer, "bin/busybox", busybox.read_bytes())
        for applet in APPLETS:
            _add(layer, f"bin/{applet}", link="busybox")
        _add(layer, "pause", pause.read_bytes())
        _add(layer, "etc/passwd", b"root:x:0:0:root:/root:/bin/sh\n", mode=0o644)
        _add(layer, "etc/group", b"root:x:0:\n", mode=0o644)
    layer_tar = raw.getvalue()
    layer_gz = gzip.compress(layer_tar, mtime=0)
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Entrypoint": ["/pause"], "Env": ["PATH=/bin"], "WorkingDir": "/"},
            "rootfs": {"type": "layers", "diff_ids": [_digest(layer_tar)]},
        }
    ).encode()
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": _digest(config),
                "size": len(config),
            },
            "layers": [
                {
                    "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": _digest(layer_gz),
                    "size": len(layer_gz),
                }
            ],
        }
    ).encode()
    index = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [
                {
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "digest": _digest(manifest),
                    "size": len(manifest),
                    "platform": {"architecture": "amd64", "os": "linux"},
                    "annotations": {
                        "io.containerd.image.name": name,
                        "org.opencontainers.image.ref.name": name.rsplit(":", 1)[-1],
                    },
                }
            ],
        }
    ).encode()
    tmp = out.with_suffix(".tmp")
    with tarfile.open(tmp, "w") as archive:
        _add(archive, "oci-layout", b'{"imageLayoutVersion": "1.0.0"}', mode=0o644)
        _add(archive, "index.json", index, mode=0o644)
        _add(archive, "blobs", directory=True)
        _add(archive, "blobs/sha256", directory=True)
        for blob in (config, layer_gz, manifest):
            _add(archive, "blobs/sha256/" + _digest(blob).split(":")[1], blob, mode=0o644)
    tmp.replace(out)
    return _digest(manifest)


def main() -> None:
    parser = argparse.ArgumentParser(prog="mkimage.py")
    parser.add_argument("out", type=Path)
    parser.add_argument("--pause", type=Path, required=True)
    parser.add_argument("--busybox", type=Path, required=True)
    parser.add_argument("--name", default=IMAGE_NAME)
    args = parser.parse_args()
    print(args.out, args.name, build(args.out, args.pause, args.busybox, args.name))


if __name__ == "__main__":
    main()
