"""A read-only registry on 127.0.0.1 serving the images of OCI archives.

CRI-O keeps images in containers/storage and takes them only by pulling; the project's images
exist only as archives: the real-node test image as an OCI archive (tools/tier-realnode.sh
bootstrap), the five driver images as one `docker save` archive, which Docker 25 and newer
write as an OCI layout too (tools/tier-docker.sh images). `ArchiveRegistry` serves their
manifests and blobs over the registry HTTP API (GET and HEAD of `/v2/`,
`/v2/<name>/manifests/<tag or digest>`, `/v2/<name>/blobs/<digest>`), which is all a pull asks
for, so a node pulls them offline through a registries.conf entry that points the images'
names at this address (plain HTTP, `insecure = true`).

Each manifest is served under the name its index entry gives (`io.containerd.image.name`,
e.g. `localhost/dracpu-api:0.2.0`, served as repository `dracpu-api`, tag `0.2.0`); one
archive of one image is also served under every name. Blobs are read from the archives on
demand, not held in memory.

Run as a program (standard library only, for tools/cluster.sh):

    python3 tests/harness/oci_registry.py [--port N] [--alias NAME=NEW]... ADDRESS_FILE ARCHIVE...

serves on 127.0.0.1 (port N, default any free one) until SIGTERM or SIGINT, once ready writing
ADDRESS_FILE: the `host:port` on its first line, then the name of every image served, one a
line. `--alias` also serves the image called NAME as NEW (a tag without a registry to push to).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import signal
import sys
import tarfile
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

MANIFEST = "application/vnd.oci.image.manifest.v1+json"
NAME_ANNOTATION = "io.containerd.image.name"


@dataclass(frozen=True)
class Blob:
    archive: Path
    offset: int
    size: int

    def read(self) -> bytes:
        with self.archive.open("rb") as handle:
            handle.seek(self.offset)
            return handle.read(self.size)


def _repository_and_tag(name: str) -> tuple[str, str]:
    """`localhost/dracpu-api:0.2.0` -> (`dracpu-api`, `0.2.0`): the path a registry serves,
    without the registry host."""
    repository, _, tag = name.rpartition(":")
    if not repository or "/" in tag:
        repository, tag = name, "latest"
    first, _, rest = repository.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        repository = rest
    return repository, tag


class ArchiveRegistry:
    """Serves the manifests of one or more OCI archives by their names; see the module
    docstring."""

    def __init__(self, *archives: Path, port: int = 0) -> None:
        if not archives:
            raise ValueError("ArchiveRegistry needs at least one archive")
        self.blobs: dict[str, Blob] = {}
        self.by_name: dict[tuple[str, str], str] = {}
        self.names: list[str] = []
        digests: list[str] = []
        for archive in archives:
            digests += self._load(Path(archive))
        self.manifest_digest = digests[0]
        self._any_name = len(archives) == 1 and len(digests) == 1
        for digest in digests:
            body = self.blobs[digest].read()
            if "sha256:" + hashlib.sha256(body).hexdigest() != digest:
                raise ValueError(f"manifest {digest} does not match its digest")
        self._server = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self._thread: threading.Thread | None = None

    def _load(self, archive: Path) -> list[str]:
        """Record the archive's blobs and names; the digests of its manifests, in its order."""
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():
                if member.isfile() and member.name.startswith("blobs/sha256/"):
                    digest = "sha256:" + member.name.rsplit("/", 1)[1]
                    self.blobs[digest] = Blob(archive, member.offset_data, member.size)
            index_file = tar.extractfile("index.json")
            assert index_file is not None
            index: dict[str, Any] = json.load(index_file)
        digests = []
        for entry in index["manifests"]:
            digest = str(entry["digest"])
            if digest not in self.blobs:
                raise ValueError(f"{archive}: manifest {digest} is not in the archive")
            digests.append(digest)
            name = entry.get("annotations", {}).get(NAME_ANNOTATION)
            if name:
                self.by_name[_repository_and_tag(name)] = digest
                self.names.append(name)
        return digests

    def alias(self, name: str, new: str) -> None:
        """Serve the image called `name` as `new` too."""
        digest = self.by_name.get(_repository_and_tag(name))
        if digest is None:
            raise ValueError(f"no image {name} in the archives")
        self.by_name[_repository_and_tag(new)] = digest
        self.names.append(new)

    @property
    def address(self) -> str:
        host, port = self._server.server_address[:2]
        return f"{host!s}:{port}"

    def manifest_for(self, repository: str, reference: str) -> str | None:
        """The digest of the manifest served as repository:reference (a tag or a digest)."""
        if reference.startswith("sha256:"):
            known = reference in self.by_name.values() or reference == self.manifest_digest
            return reference if known else None
        found = self.by_name.get((repository, reference))
        if found is None and self._any_name:
            return self.manifest_digest
        return found

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        registry = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def _reply(self, blob: Blob | bytes, media_type: str, digest: str, send: bool) -> None:
                size = len(blob) if isinstance(blob, bytes) else blob.size
                self.send_response(200)
                self.send_header("Content-Type", media_type)
                self.send_header("Content-Length", str(size))
                if digest:
                    self.send_header("Docker-Content-Digest", digest)
                self.send_header("Docker-Distribution-API-Version", "registry/2.0")
                self.end_headers()
                if send:
                    self.wfile.write(blob if isinstance(blob, bytes) else blob.read())

            def _serve(self, send: bool) -> None:
                path = self.path.split("?", 1)[0]
                if path in ("/v2", "/v2/"):
                    self._reply(b"{}", "application/json", "", send)
                    return
                _, _, rest = path.partition("/v2/")
                head, _, reference = rest.rpartition("/")
                name, _, kind = head.rpartition("/")
                if name and kind == "manifests":
                    digest = registry.manifest_for(name, reference)
                    if digest is None:
                        self.send_error(404)
                        return
                    self._reply(registry.blobs[digest], MANIFEST, digest, send)
                    return
                if name and kind == "blobs" and reference in registry.blobs:
                    blob = registry.blobs[reference]
                    self._reply(blob, "application/octet-stream", reference, send)
                    return
                self.send_error(404)

            def do_GET(self) -> None:
                self._serve(True)

            def do_HEAD(self) -> None:
                self._serve(False)

        return Handler

    def start(self) -> None:
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:  # shutdown() waits for a serve_forever that never began
            self._server.shutdown()
            self._thread.join(5)
            self._thread = None
        self._server.server_close()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="oci_registry.py", description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--alias", action="append", default=[], metavar="NAME=NEW")
    parser.add_argument("address_file", type=Path)
    parser.add_argument("archives", type=Path, nargs="+")
    args = parser.parse_args(argv)
    registry = ArchiveRegistry(*args.archives, port=args.port)
    for pair in args.alias:
        name, _, new = pair.partition("=")
        registry.alias(name, new)
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    registry.start()
    out: Path = args.address_file
    out.with_name(out.name + ".tmp").write_text(
        "\n".join([registry.address, *registry.names]) + "\n"
    )
    out.with_name(out.name + ".tmp").replace(out)
    done.wait()
    registry.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
