"""The package built as a wheel carries its generated protobuf modules: the build step
(setup.py) generates them, so a wheel installed into a clean virtual environment imports every
dracpu.pb module without anything generated in the checkout."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest
from helm_chart import ROOT

PROTOS = sorted(
    path.relative_to(ROOT / "proto").with_suffix("").as_posix().replace("/", ".")
    for path in (ROOT / "proto").rglob("*.proto")
)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dist = tmp_path_factory.mktemp("dist")
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
            str(ROOT),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (built,) = dist.glob("dra_driver_cpu-*.whl")
    return built


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
    env_dir = tmp_path / "venv"
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
    archive = zipfile.ZipFile(wheel)
    (entry_points,) = [n for n in archive.namelist() if n.endswith(".dist-info/entry_points.txt")]
    scripts = archive.read(entry_points).decode()
    assert "dracpu-gatherinfo = dracpu.topology.gatherinfo:main" in scripts
    assert "dracpu = dracpu.core.cli:main" in scripts
