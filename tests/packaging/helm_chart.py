"""The chart under test, rendered by the real helm binary, and reading aids for what it renders."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from harness.helm import (
    CHART,
    HELM,
    INSTALL_HELM,
    KUBE_VERSION,
    ROOT,
    ensure_helm,
    pinned_helm_version,
)

SERVICES = ("topology", "allocator", "dra-plugin", "nri-plugin", "api")
GRPC_SERVICES = ("topology", "allocator", "dra-plugin", "nri-plugin")
# The chart and helm names the packaging tests take from here (defined in harness.helm).
__all__ = [
    "CHART",
    "HELM",
    "INSTALL_HELM",
    "KUBE_VERSION",
    "ROOT",
    "ensure_helm",
    "pinned_helm_version",
]


COMPOSE_LOADER_SRC = ROOT / "tests" / "packaging" / "compose_loader"
COMPOSE_LOADER = ROOT / ".tools" / "bin" / "compose-loader"


def ensure_compose_loader() -> tuple[Path | None, str]:
    """The compose-go loader (tests/packaging/compose_loader) built into .tools/bin, or None
    and why not. `go build` is incremental, so this is quick once the modules are cached."""
    result = subprocess.run(
        ["go", "build", "-mod=readonly", "-o", str(COMPOSE_LOADER), "."],
        cwd=COMPOSE_LOADER_SRC,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if result.returncode != 0:
        tail = " ".join(result.stderr.strip().splitlines()[-3:])
        return None, f"the compose-go loader could not be built: {tail}"
    return COMPOSE_LOADER, ""


class RenderError(Exception):
    """helm refused the values; the message is helm's stderr."""


@dataclass
class Rendered:
    """The objects of one `helm template`, with lookups the assertions need: the release's
    `objects`, and apart from them its `hooks` (objects helm creates only around an install,
    upgrade or uninstall: the uninstall check)."""

    objects: list[dict[str, Any]]
    hooks: list[dict[str, Any]] = field(default_factory=list)

    def hook(self, kind: str) -> dict[str, Any]:
        found = [obj for obj in self.hooks if obj["kind"] == kind]
        assert len(found) == 1, f"expected one {kind} hook, got {len(found)}"
        return found[0]

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [obj for obj in self.objects if obj["kind"] == kind]

    def one(self, kind: str) -> dict[str, Any]:
        found = self.of_kind(kind)
        assert len(found) == 1, f"expected one {kind}, got {len(found)}"
        return found[0]

    @property
    def pod(self) -> dict[str, Any]:
        spec: dict[str, Any] = self.one("DaemonSet")["spec"]["template"]["spec"]
        return spec

    def container(self, name: str) -> dict[str, Any]:
        for container in self.pod["containers"]:
            if container["name"] == name:
                return dict(container)
        raise AssertionError(f"no container {name!r}")

    def volume(self, name: str) -> dict[str, Any]:
        for volume in self.pod["volumes"]:
            if volume["name"] == name:
                return dict(volume)
        raise AssertionError(f"no volume {name!r}")

    def config_file(self) -> dict[str, Any]:
        text = self.one("ConfigMap")["data"]["config.yaml"]
        data = yaml.safe_load(text)
        assert isinstance(data, dict)
        return data


def render(
    helm: Path,
    values: dict[str, Any] | None = None,
    *,
    set_args: tuple[str, ...] = (),
    release: str = "dracpu",
    namespace: str = "kube-system",
    api_versions: tuple[str, ...] = (),
) -> Rendered:
    """`helm template` of the chart; `api_versions` are kinds the cluster is said to serve
    beyond the built-in ones (`monitoring.coreos.com/v1/ServiceMonitor`)."""
    with tempfile.TemporaryDirectory(dir="/tmp") as scratch:
        values_file = Path(scratch) / "values.yaml"
        # JSON is YAML, and keeps an explicit null a null.
        values_file.write_text(json.dumps(values or {}))
        argv = [
            str(helm),
            "template",
            release,
            str(CHART),
            "--namespace",
            namespace,
            "--kube-version",
            KUBE_VERSION,
            "--values",
            str(values_file),
        ]
        for item in set_args:
            argv += ["--set", item]
        for api_version in api_versions:
            argv += ["--api-versions", api_version]
        result = subprocess.run(
            argv, capture_output=True, text=True, timeout=120, check=False, env=_env(scratch)
        )
    if result.returncode != 0:
        raise RenderError(result.stderr)
    everything = [obj for obj in yaml.safe_load_all(result.stdout) if obj]
    return Rendered(
        [obj for obj in everything if not _is_hook(obj)],
        [obj for obj in everything if _is_hook(obj)],
    )


def _is_hook(obj: dict[str, Any]) -> bool:
    return "helm.sh/hook" in ((obj.get("metadata") or {}).get("annotations") or {})


def notes(helm: Path, values: dict[str, Any] | None = None) -> str:
    """NOTES.txt as `helm install` would print it. `helm template` skips NOTES.txt and
    `helm install` needs a cluster, so a copy of the chart renders it as an ordinary value."""
    with tempfile.TemporaryDirectory(dir="/tmp") as scratch:
        chart = Path(scratch) / CHART.name
        shutil.copytree(CHART, chart)
        (chart / "templates" / "NOTES.txt").rename(chart / "notes-under-test.txt")
        (chart / "templates" / "notes-under-test.yaml").write_text(
            'notes: |\n  {{- tpl (.Files.Get "notes-under-test.txt") . | nindent 2 }}\n'
        )
        values_file = Path(scratch) / "values.yaml"
        values_file.write_text(json.dumps(values or {}))
        result = subprocess.run(
            [
                str(helm),
                "template",
                "dracpu",
                str(chart),
                "--namespace",
                "kube-system",
                "--kube-version",
                KUBE_VERSION,
                "--values",
                str(values_file),
                "--show-only",
                "templates/notes-under-test.yaml",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env=_env(scratch),
        )
    if result.returncode != 0:
        raise RenderError(result.stderr)
    text: str = yaml.safe_load(result.stdout)["notes"]
    return text


def lint(helm: Path, values: dict[str, Any] | None = None) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory(dir="/tmp") as scratch:
        values_file = Path(scratch) / "values.yaml"
        values_file.write_text(json.dumps(values or {}))
        return subprocess.run(
            [
                str(helm),
                "lint",
                "--strict",
                str(CHART),
                "--kube-version",
                KUBE_VERSION,
                "--values",
                str(values_file),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env=_env(scratch),
        )


def _env(scratch: str) -> dict[str, str]:
    # Keep helm's caches and config out of the user's home.
    env = dict(os.environ)
    for name in ("HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME"):
        env[name] = str(Path(scratch) / name.lower())
    return env


# Flags that take no value; every other `--flag` is followed by its value.
SWITCHES = frozenset({"--expose-pcie-roots", "--live"})


def flags(argv: list[str]) -> dict[str, str]:
    """`--flag value` and `--flag=value` pairs of a command line (switches map to "")."""
    found: dict[str, str] = {}
    items: Iterator[str] = iter(argv)
    for item in items:
        assert item.startswith("-"), f"stray argument {item!r} in {argv}"
        flag, joined, value = item.partition("=")
        assert flag not in found, f"{flag} given twice in {argv}"
        found[flag] = value if joined else "" if flag in SWITCHES else next(items)
    return found


def mount_for(container: dict[str, Any], path: str) -> dict[str, Any] | None:
    """The volume mount holding `path` in the container (the deepest one)."""
    best: dict[str, Any] | None = None
    for mount in container.get("volumeMounts", []):
        root = mount["mountPath"].rstrip("/") or "/"
        if (path == root or path.startswith(root.rstrip("/") + "/")) and (
            best is None or len(root) > len(best["mountPath"])
        ):
            best = mount
    return best


def schema_node(path: str) -> dict[str, Any] | None:
    """The values.schema.json node of a dotted values key (`driverConfig.groupBy`), following
    `$ref`s; None when the schema has no such key. A key below an object the schema leaves
    open (`nodeSelector.<label>`, `extraVolumes[0]...`) is the open object's."""
    schema: dict[str, Any] = json.loads((CHART / "values.schema.json").read_text())
    node: dict[str, Any] = schema
    for part in path.split("."):
        node = _resolved(schema, node)
        properties = node.get("properties")
        if isinstance(properties, dict) and part in properties:
            node = properties[part]
        elif _open(node):
            return node  # what lies below an open object or a list is the user's
        else:
            return None
    return _resolved(schema, node)


def _open(node: dict[str, Any]) -> bool:
    kinds = node.get("type")
    kinds = set(kinds) if isinstance(kinds, list) else {kinds}
    if "array" in kinds:
        return True
    if "object" not in kinds and None not in kinds:
        return False
    return node.get("additionalProperties") not in (None, False) or "properties" not in node


def _resolved(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        target: Any = schema
        for part in str(node["$ref"]).removeprefix("#/").split("/"):
            target = target[part]
        node = target
    return node
