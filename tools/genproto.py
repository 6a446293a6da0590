"""Generates the Python protobuf and gRPC modules from proto/ into the shared core.

The generated code is not committed: the package build runs this (setup.py's build_py), so
`pip install .`, `pip install -e .`, a wheel and the images all carry it. Every .proto under
proto/ lives at the import path its Python module gets (proto/dracpu/pb/x/v1/x.proto ->
dracpu.pb.x.v1.x_pb2), so generated imports resolve through the one `dracpu` namespace.

The modules are generated into a scratch folder and then put in place file by file, each
replaced atomically and only when its content changed, and stale ones removed last: a build of
an installed checkout (a wheel built from it) never leaves a moment in which a process running
from the same checkout finds dracpu.pb incomplete.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
OUT = ROOT / "services" / "core"
PB_DIR = OUT / "dracpu" / "pb"


def main() -> int:
    sources = sorted(str(p.relative_to(PROTO_ROOT)) for p in PROTO_ROOT.rglob("*.proto"))
    with tempfile.TemporaryDirectory(prefix="dracpu-genproto-") as scratch:
        generated = Path(scratch) / "dracpu" / "pb"
        generated.mkdir(parents=True)
        if sources and _protoc(sources, Path(scratch)) != 0:
            print("protoc failed", file=sys.stderr)
            return 1
        for directory in [generated, *(p for p in generated.rglob("*") if p.is_dir())]:
            (directory / "__init__.py").touch()
        wanted = {p.relative_to(generated) for p in generated.rglob("*")}
        for path in sorted(p for p in generated.rglob("*") if p.is_file()):
            _put(path, PB_DIR / path.relative_to(generated))
    # Stale modules (a .proto removed or moved) go last; the stamp and bytecode caches stay.
    for path in sorted(PB_DIR.rglob("*"), reverse=True):
        relative = path.relative_to(PB_DIR)
        kept = (
            relative in wanted or "__pycache__" in relative.parts or relative.name == ".generated"
        )
        if kept:
            continue
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
    (PB_DIR / ".generated").touch()
    return 0


def _protoc(sources: list[str], out: Path) -> int:
    include = str(Path(protoc.__file__).parent / "_proto")
    return int(
        protoc.main(
            [
                "grpc_tools.protoc",
                f"-I{PROTO_ROOT}",
                f"-I{include}",
                f"--python_out={out}",
                f"--pyi_out={out}",
                f"--grpc_python_out={out}",
                *sources,
            ]
        )
    )


def _put(source: Path, target: Path) -> None:
    """`target` holds `source`'s bytes, replaced atomically and only when they differ."""
    data = source.read_bytes()
    if target.is_file() and target.read_bytes() == data:
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    temp = target.with_name(f".{target.name}.tmp")
    temp.write_bytes(data)
    os.replace(temp, target)


if __name__ == "__main__":
    raise SystemExit(main())
