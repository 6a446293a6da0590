"""Generates the Python protobuf and gRPC modules from proto/ into the shared core.

The generated code is not committed: the package build runs this (setup.py's build_py), so
`pip install .`, `pip install -e .`, a wheel and the images all carry it. Every .proto under
proto/ lives at the import path its Python module gets (proto/dracpu/pb/x/v1/x.proto ->
dracpu.pb.x.v1.x_pb2), so generated imports resolve through the one `dracpu` namespace.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
OUT = ROOT / "services" / "core"
PB_DIR = OUT / "dracpu" / "pb"


def main() -> int:
    for child in PB_DIR.iterdir():
        if child.is_dir():
            shutil.rmtree(child)
    sources = sorted(str(p.relative_to(PROTO_ROOT)) for p in PROTO_ROOT.rglob("*.proto"))
    if not sources:
        return 0
    include = str(Path(protoc.__file__).parent / "_proto")
    args = [
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"-I{include}",
        f"--python_out={OUT}",
        f"--pyi_out={OUT}",
        f"--grpc_python_out={OUT}",
        *sources,
    ]
    if protoc.main(args) != 0:
        print("protoc failed", file=sys.stderr)
        return 1
    for directory in [PB_DIR, *(p for p in PB_DIR.rglob("*") if p.is_dir())]:
        (directory / "__init__.py").touch()
    (PB_DIR / ".generated").touch()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
