"""The layout of a local cluster folder: the stand-in for the API server that `dracpu dev`
and the tests use. The dra-plugin reads claims and Nodes from it and writes its ResourceSlices
there; the dev tools write the claims and read the slices.

    <root>/resourceclaims/<namespace>/<name>.yaml   ResourceClaims
    <root>/resourceslices/<name>.yaml               ResourceSlices
    <root>/nodes/<name>.yaml                        Node objects (optional: their metadata.uid)

Claim files change in more than one process (the dev tools write and delete claims, the
dra-plugin writes their status), so every change of a claim file holds `claims_locked()`.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ClusterFolderLayout:
    root: Path

    @property
    def claims_dir(self) -> Path:
        return self.root / "resourceclaims"

    def claim_file(self, namespace: str, name: str) -> Path:
        return self.claims_dir / namespace / f"{name}.yaml"

    @contextmanager
    def claims_locked(self) -> Iterator[None]:
        """Held (flock) across a read-modify-write or a delete of a claim file, so a status
        written for a claim never brings back a claim file another process just deleted."""
        self.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.root / ".claims.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    @property
    def slices_dir(self) -> Path:
        return self.root / "resourceslices"

    def slice_file(self, name: str) -> Path:
        return self.slices_dir / f"{name}.yaml"

    @property
    def nodes_dir(self) -> Path:
        return self.root / "nodes"

    def node_file(self, name: str) -> Path:
        return self.nodes_dir / f"{name}.yaml"
