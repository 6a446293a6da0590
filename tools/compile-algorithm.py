"""Compile the placement algorithm's hot modules with mypyc into the tool cache, once per source.

The build lands in `<cache>/algorithm-<python tag>-<digest of the sources>/` (see
dracpu.allocator.algorithm.compiled), so a second run, or another clone of the same sources,
finds it and returns at once; an edited source gets a build of its own. Without a C compiler it
says so in one line and leaves the algorithm to run as Python. A build mypyc refuses fails
with mypyc's own message, and the algorithm runs as Python until the source is mended.

.venv/bin/python tools/compile-algorithm.py
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

from dracpu.allocator.algorithm import compiled

ROOT = Path(__file__).resolve().parent.parent
KEEP = 4  # builds kept in the cache, this one included

# Run in a child process (setuptools and the compiler print every step; the log keeps them).
BUILD = """
import sys
from mypyc.build import mypycify
from setuptools import Distribution
sources, group, out, temp = sys.argv[1:5]
modules = [f"{sources}/{name}.py" for name in sys.argv[5:]]
ext = mypycify(modules, opt_level="3", group_name=group, target_dir=f"{temp}/c")
dist = Distribution({"name": "dracpu-algorithm", "ext_modules": ext})
command = dist.get_command_obj("build_ext")
command.build_lib, command.build_temp, command.parallel = out, f"{temp}/obj", 2
dist.run_command("build_ext")
"""


def missing() -> str:
    """What mypyc lacks here to build ("" when nothing): a C compiler, the Python headers."""
    configured = shlex.split(sysconfig.get_config_var("CC") or "cc")
    if not configured or shutil.which(configured[0]) is None:
        return f"no C compiler ({configured[0] if configured else 'cc'})"
    include = Path(sysconfig.get_paths()["include"]) / "Python.h"
    if not include.is_file():
        return f"no Python headers ({include})"
    return ""


def main() -> int:
    try:
        build = compiled.build_dir()
    except OSError as exc:
        print(f"algorithm: {exc}; the placement algorithm runs as Python")
        return 0
    if compiled.complete(build):
        print(f"algorithm: compiled build {build.name} ready")
        return 0
    lacking = missing()
    if lacking:
        print(f"algorithm: {lacking} here; the placement algorithm runs as Python")
        return 0
    build.parent.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    print(f"algorithm: compiling {len(compiled.COMPILED)} modules with mypyc into {build}")
    with tempfile.TemporaryDirectory(prefix=f".{build.name}-", dir=build.parent) as scratch:
        log = Path(scratch) / "build.log"
        with log.open("w") as out:
            done = subprocess.run(
                [
                    sys.executable,
                    "-c",
                    BUILD,
                    str(compiled.SOURCES),
                    f"dracpu.allocator.algorithm.{compiled.GROUP}",
                    f"{scratch}/lib",
                    f"{scratch}/tmp",
                    *compiled.COMPILED,
                ],
                cwd=ROOT,  # pyproject.toml's mypy settings find dracpu.core
                stdout=out,
                stderr=subprocess.STDOUT,
                check=False,
            )
        if done.returncode != 0:
            errors = [line for line in log.read_text().splitlines() if "error" in line]
            said = "; ".join(errors[:3] or log.read_text().splitlines()[-1:])
            print(f"algorithm: mypyc could not compile it: {said}")
            return 1
        staged = Path(scratch) / "lib"
        if not compiled.complete(staged):
            print(f"algorithm: the build in {staged} lacks a module; it runs as Python")
            return 1
        os.replace(staged, build)  # whole or not at all
    print(f"algorithm: compiled in {time.monotonic() - began:.0f} s")
    prune(build)
    return 0


def prune(kept: Path) -> None:
    """Drop all but the newest few builds of other sources (other clones may still use them)."""
    others = sorted(
        (p for p in kept.parent.glob(f"algorithm-{sys.implementation.cache_tag}-*") if p != kept),
        key=lambda p: p.stat().st_mtime,
        reverse=True,
    )
    for old in others[KEEP - 1 :]:
        shutil.rmtree(old, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
