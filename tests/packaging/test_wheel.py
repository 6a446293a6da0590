"""The package built as a wheel carries its generated protobuf modules: the build step
(setup.py) generates them, so a wheel installed into a clean virtual environment imports every
dracpu.pb module without anything generated in the checkout. It declares the `dracpu`
subcommands of the service folders it was built from, as the images' wheels are (the
Dockerfile builds each from a copy of the tree holding the shared core and one service)."""

from __future__ import annotations

import configparser
import fcntl
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest
from harness.commands import COMMANDS
from helm_chart import ROOT

PROTOS = sorted(
    path.relative_to(ROOT / "proto").with_suffix("").as_posix().replace("/", ".")
    for path in (ROOT / "proto").rglob("*.proto")
)
CORE_COMMANDS = ("health", "introspect")


def build_wheel(tree: Path, dist: Path) -> Path:
    # setuptools builds in the tree's own build/ and egg-info folders: two test workers building
    # the same tree at once would tear each other's files, so they take turns.
    with (tree / ".wheel-build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _build_wheel(tree, dist)


def _build_wheel(tree: Path, dist: Path) -> Path:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--wheel-dir",
            str(dist),
            str(tree),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (built,) = dist.glob("dra_driver_cpu-*.whl")
    return built


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(ROOT, tmp_path_factory.mktemp("dist"))


@pytest.fixture(scope="module")
def topology_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The topology image's wheel: built, as the Dockerfile does, from a copy of the tree
    holding the shared core and services/topology only."""
    tree = tmp_path_factory.mktemp("tree-topology")
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md"):
        shutil.copy2(ROOT / name, tree / name)
    (tree / "tools").mkdir()
    shutil.copy2(ROOT / "tools" / "genproto.py", tree / "tools" / "genproto.py")
    shutil.copytree(ROOT / "proto", tree / "proto", ignore=skip)
    for service in ("core", "topology"):
        shutil.copytree(ROOT / "services" / service, tree / "services" / service, ignore=skip)
    return build_wheel(tree, tmp_path_factory.mktemp("dist-topology"))


def entry_points(wheel: Path) -> configparser.ConfigParser:
    archive = zipfile.ZipFile(wheel)
    (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/entry_points.txt")]
    parser = configparser.ConfigParser(delimiters=("=",))
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(archive.read(name).decode())
    return parser


def install(wheel: Path, env_dir: Path) -> tuple[Path, str]:
    """A clean virtual environment holding `wheel`: its python and its site-packages."""
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            str(wheel),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    # Third-party packages from the development environment, by path only: its .pth files
    # (and so its editable dracpu) stay out.
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    Path(site, "dev-third-party.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python, site


def test_wheel_holds_the_generated_modules_of_every_proto(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    assert PROTOS
    for module in PROTOS:
        path = module.replace(".", "/")
        assert f"{path}_pb2.py" in names, module
        assert f"{path}_pb2.pyi" in names, module
        # Every generated package is a package in the wheel.
        assert f"{path.rsplit('/', 1)[0]}/__init__.py" in names, module


def test_wheel_in_a_clean_venv_imports_every_pb_module(wheel: Path, tmp_path: Path) -> None:
    python, site = install(wheel, tmp_path / "venv")
    probe = (
        "import importlib, sys\n"
        f"modules = {PROTOS!r}\n"
        "for name in modules:\n"
        "    for suffix in ('_pb2', '_pb2_grpc'):\n"
        "        module = importlib.import_module(name + suffix)\n"
        f"        assert module.__file__.startswith({site!r}), module.__file__\n"
        "print(len(modules))\n"
    )
    result = subprocess.run(
        [str(python), "-c", probe], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(len(PROTOS))


def test_gatherinfo_has_the_reference_drivers_legacy_command(wheel: Path) -> None:
    # `dracpu gatherinfo` and `dracpu-gatherinfo` (the reference keeps the latter in 0.2.z and
    # 0.3.z); the topology image links both at / as well.
    scripts = entry_points(wheel)["console_scripts"]
    assert scripts["dracpu-gatherinfo"] == "dracpu.topology.gatherinfo:main"
    assert scripts["dracpu"] == "dracpu.core.cli:main"
    assert entry_points(wheel)["dracpu.commands"]["gatherinfo"] == COMMANDS["gatherinfo"]


def test_the_whole_wheel_declares_every_subcommand(wheel: Path) -> None:
    assert dict(entry_points(wheel)["dracpu.commands"]) == COMMANDS


def test_a_wheel_of_core_and_topology_declares_only_their_subcommands(
    topology_wheel: Path,
) -> None:
    names = zipfile.ZipFile(topology_wheel).namelist()
    assert not [n for n in names if n.startswith(("dracpu/allocator/", "dracpu/dev/"))]
    declared = dict(entry_points(topology_wheel)["dracpu.commands"])
    assert declared == {n: COMMANDS[n] for n in ("gatherinfo", *CORE_COMMANDS)}
    # The console scripts stay every service's: the Dockerfile keeps each image's own.
    assert entry_points(topology_wheel)["console_scripts"]["dracpu"] == "dracpu.core.cli:main"


def test_the_dracpu_command_of_a_topology_install_offers_its_own_subcommands(
    topology_wheel: Path, tmp_path: Path
) -> None:
    python, _ = install(topology_wheel, tmp_path / "venv")

    def dracpu(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(python), "-m", "dracpu.core.cli", *args],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
        )

    listed = dracpu("--help")
    assert listed.returncode == 0, listed.stderr
    commands = [line.split()[0] for line in listed.stdout.splitlines()[3:]]
    assert commands == ["gatherinfo", *CORE_COMMANDS, "version"]
    absent = dracpu("simulate", "--count", "2")
    assert (absent.returncode, absent.stderr) == (2, "dracpu: error: unknown command 'simulate'\n")
    present = dracpu("gatherinfo", "--no-such-flag")
    assert present.returncode == 2
    assert present.stderr == "dracpu gatherinfo: error: unrecognized arguments: --no-such-flag\n"
