"""Maps the one `dracpu` namespace, spread over the service folders, onto packages, and
generates the protobuf and gRPC modules from proto/ as a step of the build.

Every way the package is built (`pip install .`, `pip install -e .`, a wheel, the images) runs
build_py, which runs tools/genproto.py first; the generated packages under dracpu.pb are then
packaged like any other. grpcio-tools is a build requirement (pyproject.toml), pinned in
constraints.txt together with the protobuf runtime.
"""

import importlib.util
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
ROOTS = [
    "services/core",
    "services/topology",
    "services/allocator",
    "services/dra-plugin",
    "services/nri-plugin",
    "services/api",
    "dev",
]


def _packages() -> dict[str, str]:
    mapping: dict[str, str] = {}
    for root in ROOTS:
        for init in sorted(Path(root).glob("dracpu/**/__init__.py")):
            package = init.parent
            mapping[".".join(package.relative_to(root).parts)] = package.as_posix()
    return mapping


def _generate_protos() -> None:
    spec = importlib.util.spec_from_file_location("genproto", HERE / "tools" / "genproto.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if module.main() != 0:
        raise SystemExit("generating the protobuf modules failed")


class BuildWithProtos(build_py):
    """build_py that generates dracpu.pb.* first and packages what it generated."""

    def finalize_options(self) -> None:
        _generate_protos()
        mapping = _packages()
        self.distribution.packages = sorted(mapping)
        self.distribution.package_dir = mapping
        super().finalize_options()


PACKAGE_DIR = _packages()

setup(
    packages=sorted(PACKAGE_DIR),
    package_dir=PACKAGE_DIR,
    cmdclass={"build_py": BuildWithProtos},
)
