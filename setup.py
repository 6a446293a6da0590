"""Maps the one `dracpu` namespace, spread over the service folders, onto packages, and
generates the protobuf and gRPC modules from proto/ as a step of the build.

Every way the package is built (`pip install .`, `pip install -e .`, a wheel, the images) runs
build_py, which runs tools/genproto.py first; the generated packages under dracpu.pb are then
packaged like any other. grpcio-tools is a build requirement (pyproject.toml), pinned in
constraints.txt together with the protobuf runtime.

It also declares the entry points (pyproject.toml lists them as dynamic): the console scripts,
and the `dracpu` command's subcommands (group `dracpu.commands`, read by dracpu.core.cli) of the
service folders present in the tree being built, so a wheel built from the shared core and one
service (the Dockerfile) declares only the subcommands it can run.
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

# The console scripts: every service's, whichever folders are present (the Dockerfile keeps
# each image's own).
CONSOLE_SCRIPTS = {
    "dracpu": "dracpu.core.cli:main",
    "dracpu-topology": "dracpu.topology.main:main",
    "dracpu-gatherinfo": "dracpu.topology.gatherinfo:main",
    "dracpu-allocator": "dracpu.allocator.main:main",
    "dracpu-dra-plugin": "dracpu.dra_plugin.main:main",
    "dracpu-nri-plugin": "dracpu.nri_plugin.main:main",
    "dracpu-api": "dracpu.api.main:main",
}
# The `dracpu` subcommands each folder brings: name -> "module:main", the module defining
# SUMMARY next to main.
COMMAND_GROUP = "dracpu.commands"
COMMANDS = {
    "services/core": {
        "introspect": "dracpu.core.introspect:main",
        "health": "dracpu.core.healthcheck:main",
    },
    "services/topology": {"gatherinfo": "dracpu.topology.gatherinfo:main"},
    "services/dra-plugin": {"uninstall-check": "dracpu.dra_plugin.uninstall_check:main"},
    "services/allocator": {
        "simulate": "dracpu.allocator.simulate:main",
        "validate": "dracpu.allocator.validate:main",
    },
    "dev": {"dev": "dracpu.dev.cli:main"},
}


def _present(root: str) -> bool:
    return (HERE / root / "dracpu").is_dir()


def _entry_points() -> dict[str, list[str]]:
    commands = {
        name: target
        for root in ROOTS
        if _present(root)
        for name, target in COMMANDS.get(root, {}).items()
    }
    return {
        "console_scripts": [f"{name} = {target}" for name, target in CONSOLE_SCRIPTS.items()],
        COMMAND_GROUP: [f"{name} = {target}" for name, target in sorted(commands.items())],
    }


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
    entry_points=_entry_points(),
    cmdclass={"build_py": BuildWithProtos},
)
