"""A read-only registry on 127.0.0.1 serving the one image of an OCI archive.

CRI-O keeps images in containers/storage and takes them only by pulling; the real-node test
image exists only as an OCI archive (tools/tier-realnode.sh bootstrap). `ArchiveRegistry`
serves that archive's manifest and blobs over the registry HTTP API (GET and HEAD of
`/v2/`, `/v2/<name>/manifests/<tag or digest>`, `/v2/<name>/blobs/<digest>`), which is all a
pull asks for, so the node pulls the image offline through a registries.conf entry that points
the image's name at this address (plain HTTP, `insecure = true`).
"""

from __future__ import annotations

import hashlib
import json
import tarfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

MANIFEST = "application/vnd.oci.image.manifest.v1+json"


class ArchiveRegistry:
    """Serves the first manifest of an OCI archive under every repository name and tag."""

    def __init__(self, archive: Path) -> None:
        self.blobs: dict[str, bytes] = {}
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():
                if member.isfile() and member.name.startswith("blobs/sha256/"):
                    handle = tar.extractfile(member)
                    assert handle is not None
                    self.blobs["sha256:" + member.name.rsplit("/", 1)[1]] = handle.read()
            index_file = tar.extractfile("index.json")
            assert index_file is not None
            index: dict[str, Any] = json.load(index_file)
        self.manifest_digest = str(index["manifests"][0]["digest"])
        self.manifest = self.blobs[self.manifest_digest]
        if "sha256:" + hashlib.sha256(self.manifest).hexdigest() != self.manifest_digest:
            raise ValueError(f"{archive}: the manifest does not match its digest")
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> str:
        host, port = self._server.server_address[:2]
        return f"{host!s}:{port}"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        registry = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def _reply(self, body: bytes, media_type: str, digest: str, send: bool) -> None:
                self.send_response(200)
                self.send_header("Content-Type", media_type)
                self.send_header("Content-Length", str(len(body)))
                if digest:
                    self.send_header("Docker-Content-Digest", digest)
                self.send_header("Docker-Distribution-API-Version", "registry/2.0")
                self.end_headers()
                if send:
                    self.wfile.write(body)

            def _serve(self, send: bool) -> None:
                path = self.path.split("?", 1)[0]
                if path in ("/v2", "/v2/"):
                    self._reply(b"{}", "application/json", "", send)
                    return
                _, _, rest = path.partition("/v2/")
                name, kind, reference = rest.rpartition("/")[0], "", rest.rpartition("/")[2]
                name, _, kind = name.rpartition("/")
                if name and kind == "manifests":
                    if reference.startswith("sha256:") and reference != registry.manifest_digest:
                        self.send_error(404)
                        return
                    digest = registry.manifest_digest
                    self._reply(registry.manifest, MANIFEST, digest, send)
                    return
                if name and kind == "blobs" and reference in registry.blobs:
                    body = registry.blobs[reference]
                    self._reply(body, "application/octet-stream", reference, send)
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
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(5)
