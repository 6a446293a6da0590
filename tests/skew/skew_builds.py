"""The builds a version-skew test runs: this checkout (HEAD) and every earlier release, each with
its own interpreter.

Releases are listed in the committed RELEASES file (`<tag> <full commit>`, oldest first); the
git tag wins when the clone has it. A release is installed once into its own venv outside the
clone, keyed by its commit (`$DRACPU_CACHE/release-venv-<commit>`, sealed by `.complete`), from
`git archive` of that commit, with its protobufs generated there.
"""

from __future__ import annotations

import fcntl
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from tiers import CACHE

REPO = Path(__file__).resolve().parents[2]
RELEASES_FILE = REPO / "RELEASES"
HEAD_LABEL = "HEAD"


@dataclass(frozen=True)
class Release:
    tag: str
    commit: str


@dataclass(frozen=True)
class Build:
    """One installed version of the services: its label and the interpreter that runs it."""

    label: str
    python: Path
    version: str  # what its dracpu.core.__version__ says

    @property
    def bin(self) -> Path:
        return self.python.parent


def _git(*args: str) -> str | None:
    result = subprocess.run(
        ["git", "-C", str(REPO), *args], capture_output=True, text=True, check=False
    )
    return result.stdout.strip() if result.returncode == 0 else None


def releases() -> list[Release]:
    """The releases of RELEASES, oldest first; a tag present in the clone overrides the file."""
    found = []
    for line in RELEASES_FILE.read_text(encoding="utf-8").splitlines():
        words = line.split("#", 1)[0].split()
        if len(words) != 2:
            continue
        tag, commit = words
        tagged = _git("rev-parse", "-q", "--verify", f"refs/tags/{tag}^{{commit}}")
        found.append(Release(tag, tagged or commit))
    return found


def head_commit() -> str | None:
    return _git("rev-parse", "HEAD")


def earlier_releases() -> list[Release]:
    """Every release of RELEASES that is not this checkout, oldest first: the skew tests hold
    each of them against HEAD. Empty when HEAD is the only release there is (then skew is HEAD
    against HEAD)."""
    head = head_commit()
    return [release for release in releases() if release.commit != head]


def previous_release() -> Release | None:
    """The newest release that is not this checkout; None when there is none."""
    older = earlier_releases()
    return older[-1] if older else None


def _version_of(python: Path) -> str:
    """What the build's services report as their version. Asked outside this checkout: a
    release reads its version from the installed distribution's metadata, which Python looks
    up on sys.path, the current folder first, and this checkout's root holds the metadata of
    its own editable install (dra_driver_cpu.egg-info, at this checkout's version)."""
    result = subprocess.run(
        [str(python), "-c", "import dracpu.core; print(dracpu.core.__version__)"],
        capture_output=True,
        text=True,
        check=True,
        cwd=python.parent,
    )
    return result.stdout.strip()


def head_build() -> Build:
    python = Path(sys.executable)
    return Build(HEAD_LABEL, python, _version_of(python))


def _export(commit: str, destination: Path) -> None:
    """The tree of `commit`, as `git archive` gives it, into `destination`."""
    with tempfile.TemporaryFile() as archive:
        subprocess.run(
            ["git", "-C", str(REPO), "archive", "--format=tar", commit],
            stdout=archive,
            check=True,
        )
        archive.seek(0)
        with tarfile.open(fileobj=archive) as tar:
            tar.extractall(destination, filter="data")


def _run(argv: list[str], log: Path) -> None:
    with log.open("a") as sink:
        sink.write(f"$ {' '.join(argv)}\n")
        sink.flush()
        done = subprocess.run(argv, stdout=sink, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-10:])
        raise AssertionError(f"{Path(argv[0]).name} failed ({done.returncode}):\n{tail}")


def _install(release: Release, root: Path) -> None:
    source = root / "src"
    _export(release.commit, source)
    log = root / "install.log"
    base = Path(getattr(sys, "_base_executable", sys.executable))
    python = str(root / "bin" / "python")
    _run([str(base), "-m", "venv", str(root)], log)
    pip = [python, "-m", "pip", "install", "--quiet"]
    _run([*pip, "--upgrade", "pip"], log)
    _run([*pip, "-e", str(source), "grpcio-tools>=1.66,<2"], log)
    _run([python, str(source / "tools" / "genproto.py")], log)


def release_build(release: Release) -> Build:
    """The release installed in its cached venv (built on first use; skips the test when the
    clone lacks the release's commit, as a shallow clone does)."""
    if _git("cat-file", "-e", f"{release.commit}^{{commit}}") is None:
        pytest.skip(
            f"release {release.tag} ({release.commit[:12]}) is not in this clone (shallow?)"
        )
    root = CACHE / f"release-venv-{release.commit}"
    CACHE.mkdir(parents=True, exist_ok=True)
    with (CACHE / f".release-venv-{release.commit}.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one builder at a time; the others wait and reuse
        if not (root / ".complete").exists():
            shutil.rmtree(root, ignore_errors=True)
            print(f"skew: installing {release.tag} into {root}", flush=True)
            _install(release, root)
            (root / ".complete").write_text(json.dumps({"tag": release.tag}) + "\n")
    python = root / "bin" / "python"
    return Build(release.tag, python, _version_of(python))
