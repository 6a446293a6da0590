"""The layout of a local cluster folder: the stand-in for the API server that `dracpu dev`
and the tests use. The dra-plugin reads claims and Nodes from it and writes its ResourceSlices
there; the dev tools write the claims and read the slices.

    <root>/resourceclaims/<namespace>/<name>.yaml   ResourceClaims
    <root>/resourceslices/<name>.yaml               ResourceSlices
    <root>/nodes/<name>.yaml                        Node objects (optional: their metadata.uid)
"""

from __future__ import annotations

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
