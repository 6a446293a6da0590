"""Maps the one `dracpu` namespace, spread over the service folders, onto packages."""

from pathlib import Path

from setuptools import setup

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


PACKAGE_DIR = _packages()

setup(packages=sorted(PACKAGE_DIR), package_dir=PACKAGE_DIR)
