"""The local cluster folder from the API-server side: published ResourceSlices are read from
`resourceslices/`, ResourceClaims are written to `resourceclaims/<namespace>/<name>.yaml`."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from dracpu.core.cluster_folder import ClusterFolderLayout
from dracpu.core.errors import InvalidInputError, NotFoundError, StateError
from dracpu.core.files import write_atomic

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def check_name(kind: str, name: str) -> str:
    if not _DNS_LABEL.match(name):
        raise InvalidInputError(
            f"{kind} {name!r} is not a DNS label (lowercase letters, digits and '-', "
            "at most 63, starting and ending with a letter or digit)"
        )
    return name


def _documents(path: Path) -> Iterator[dict[str, Any]]:
    try:
        loaded = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
    except (OSError, yaml.YAMLError) as exc:
        raise StateError(f"cannot read {path}: {exc}") from None
    for document in loaded:
        if isinstance(document, dict) and isinstance(document.get("items"), list):
            yield from (item for item in document["items"] if isinstance(item, dict))
        elif isinstance(document, dict):
            yield document


def _yaml_files(directory: Path) -> list[Path]:
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.rglob("*") if p.suffix in (".yaml", ".yml", ".json"))


class ClusterFolder:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.layout = ClusterFolderLayout(root)

    @property
    def claims_dir(self) -> Path:
        return self.layout.claims_dir

    @property
    def slices_dir(self) -> Path:
        return self.layout.slices_dir

    def slices(self) -> list[dict[str, Any]]:
        return [doc for path in _yaml_files(self.slices_dir) for doc in _documents(path)]

    def claims(self) -> list[dict[str, Any]]:
        return [doc for path in _yaml_files(self.claims_dir) for doc in _documents(path)]

    def claim_path(self, namespace: str, name: str) -> Path:
        return self.layout.claim_file(namespace, name)

    def read_claim(self, namespace: str, name: str) -> dict[str, Any]:
        path = self.claim_path(namespace, name)
        if not path.exists():
            raise NotFoundError(f"claim {namespace}/{name} not found ({path})")
        documents = list(_documents(path))
        if len(documents) != 1:
            raise StateError(f"{path}: expected one ResourceClaim")
        return documents[0]

    def write_claim(self, claim: dict[str, Any]) -> Path:
        """Write atomically, as the API server would show it: complete or not at all."""
        metadata = claim["metadata"]
        path = self.claim_path(metadata["namespace"], metadata["name"])
        text = yaml.safe_dump(claim, sort_keys=False)
        with self.layout.claims_locked():
            write_atomic(path, text.encode("utf-8"), durable=True)
        return path

    def delete_claim(self, namespace: str, name: str) -> bool:
        path = self.claim_path(namespace, name)
        with self.layout.claims_locked():
            existed = path.exists()
            path.unlink(missing_ok=True)
        return existed
