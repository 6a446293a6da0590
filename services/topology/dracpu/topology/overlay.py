"""The sysfs overlay (`sysfsOverlay` / `--sysfs-overlay`): a YAML file of sysfs overrides
applied over the real tree, in the reference driver's format.

The file is one YAML mapping. Each key is an absolute, clean path beneath `/sys`; each value is
a string, the file's contents (keep the kernel's trailing newline: `"0-3\\n"`). A path names a
file, which replaces the real one or is added; its parent directories exist in the merged
view, with the real entries beside the overlay's. Every other path reads the real tree. Paths
are taken relative to the sysfs root the service reads, so `/sys/devices/system/cpu/online`
overrides `<root>/devices/system/cpu/online`.

A CPU belongs to one NUMA node: an overlay entry `/sys/devices/system/cpu/cpuN/nodeM` hides
the real `nodeK` entries of that CPU directory, so the CPU moves to node M. An overlay that
names two nodes for one CPU, a path that is both a file and a directory, a duplicate key or a
non-string value is refused at start with an error naming it. The file is read once at start:
a change takes a restart.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field
from typing import Any

from dracpu.core.documents import decode, load_yaml, read_regular
from dracpu.core.errors import ConfigError

ROOT = "/sys"
_CPU_DIR = re.compile(r"devices/system/cpu/cpu[0-9]+")
_NODE_ENTRY = re.compile(r"node[0-9]+")


@dataclass(frozen=True)
class SysfsOverlay:
    """Overlay files by path relative to the sysfs root, and the directories they imply with
    their overlay entries (name -> is a directory)."""

    files: dict[str, bytes] = field(default_factory=dict)
    dirs: dict[str, dict[str, bool]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.files)

    def is_file(self, relative: str) -> bool:
        return relative in self.files

    def is_dir(self, relative: str) -> bool:
        return relative in self.dirs

    def merge_listing(self, relative: str, base: list[str]) -> list[str]:
        """The merged listing of an overlay directory, given the real entries (or none)."""
        entries = self.dirs[relative]
        mask_nodes = _CPU_DIR.fullmatch(relative) is not None and any(
            _NODE_ENTRY.fullmatch(name) for name in entries
        )
        merged = {name for name in base if not (mask_nodes and _NODE_ENTRY.fullmatch(name))}
        return sorted(merged | set(entries))


def _relative(key: str) -> str:
    if not key.startswith(ROOT + "/"):
        raise ConfigError(f"path {key!r} must be beneath {ROOT}")
    if posixpath.normpath(key) != key:
        raise ConfigError(f"path {key!r} is not clean")
    return key.removeprefix(ROOT + "/")


def build(entries: dict[str, str]) -> SysfsOverlay:
    """An overlay from `{absolute path: contents}`; raises ConfigError naming a bad entry."""
    files: dict[str, bytes] = {}
    for key, contents in entries.items():
        files[_relative(key)] = contents.encode("utf-8")
    dirs: dict[str, dict[str, bool]] = {"": {}} if files else {}
    for name in files:
        parts = name.split("/")
        for depth in range(1, len(parts)):
            parent = "/".join(parts[:depth])
            if parent in files:
                raise ConfigError(
                    f"path {posixpath.join(ROOT, parent)!r} is both a file and a directory"
                )
        for depth, part in enumerate(parts):
            parent = "/".join(parts[:depth])
            is_dir = depth < len(parts) - 1
            dirs.setdefault(parent, {})[part] = is_dir
            if is_dir:
                dirs.setdefault("/".join(parts[: depth + 1]), {})
    for directory, children in dirs.items():
        if _CPU_DIR.fullmatch(directory) is None:
            continue
        nodes = sorted(name for name in children if _NODE_ENTRY.fullmatch(name))
        if len(nodes) > 1:
            raise ConfigError(
                f"defines several NUMA nodes beneath {ROOT}/{directory}: {', '.join(nodes)}"
            )
    return SysfsOverlay(files, dirs)


def _duplicate_key(text: str) -> str | None:
    import yaml

    node = yaml.compose(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    if not isinstance(node, yaml.MappingNode):
        return None
    seen: set[str] = set()
    for key, _ in node.value:
        if key.value in seen:
            return str(key.value)
        seen.add(key.value)
    return None


def parse(text: str, source: str) -> SysfsOverlay:
    """An overlay from the file's text; every error starts with `source`."""
    data: Any = load_yaml(text, source, ConfigError)
    if data is None:
        return SysfsOverlay()
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a YAML mapping of paths to contents")
    duplicate = _duplicate_key(text)
    if duplicate is not None:
        raise ConfigError(f"{source}: duplicate path {duplicate!r}")
    entries: dict[str, str] = {}
    for key, value in data.items():
        if not isinstance(key, str):
            raise ConfigError(f"{source}: path {key!r} must be a string")
        if not isinstance(value, str):
            raise ConfigError(f"{source}: value for {key!r} must be a string")
        entries[key] = value
    try:
        return build(entries)
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None


def read(path: str) -> SysfsOverlay:
    """The overlay in file `path`; an empty path is no overlay."""
    if not path:
        return SysfsOverlay()
    source = f"sysfs overlay {path}"
    try:
        data = read_regular(path, "sysfs overlay", error=ConfigError)
    except FileNotFoundError:
        raise ConfigError(f"{source}: No such file or directory") from None
    return parse(decode(data, source, ConfigError), source)
