"""Bad input at the services' edges: one stderr line and exit 2 for a CLI, a precise status for
a service, and never a file deleted or a path left behind that the input named."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from harness.nri_bed import BIN, Allocator, write_topology_report

from dracpu.core.errors import InvalidInputError
from dracpu.dra_plugin.common.resource_claim import ClaimRef
from dracpu.dra_plugin.kubelet.metadata import MetadataWriter

pytestmark = pytest.mark.security


def run(command: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / command), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def one_line_error(result: subprocess.CompletedProcess[str], fragment: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert fragment in lines[0], lines[0]


def allocator_args(root: Path, socket: Path, *extra: str) -> list[str]:
    return [
        "--socket",
        str(socket),
        "--topology-file",
        str(write_topology_report(root)),
        "--state-dir",
        str(root / "state"),
        "--cdi-dir",
        str(root / "cdi"),
        *extra,
    ]


@pytest.mark.parametrize("kind", ["regular-file", "directory"])
def test_socket_path_that_is_not_a_socket_is_refused_and_kept(short_tmp: Path, kind: str) -> None:
    target = short_tmp / "precious"
    if kind == "regular-file":
        target.write_text("keep me")
    else:
        target.mkdir()
    result = run("dracpu-allocator", *allocator_args(short_tmp, target))
    one_line_error(result, "is not a socket")
    if kind == "regular-file":
        assert target.read_text() == "keep me"
    else:
        assert target.is_dir()


@pytest.mark.parametrize(
    "command", ["dracpu-allocator", "dracpu-api", "dracpu-dra-plugin", "dracpu-nri-plugin"]
)
def test_verbosity_out_of_range(command: str) -> None:
    one_line_error(run(command, "-v", "99"), "verbosity must be 0-10")


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (b"groupBy: \xff\xfe\n", "not valid UTF-8"),
        (b"a: " + b"[" * 100_000 + b"]" * 100_000 + b"\n", "not valid YAML"),
        (
            b"publishNodeAllocatableResourceMapping: 'yes'\n",
            "publishNodeAllocatableResourceMapping",
        ),
    ],
    ids=["invalid-utf8", "nested-100000-deep", "string-yes-as-boolean"],
)
def test_bad_config_files(short_tmp: Path, content: bytes, fragment: str) -> None:
    config = short_tmp / "config.yaml"
    config.write_bytes(content)
    result = run(
        "dracpu-allocator",
        *allocator_args(short_tmp, short_tmp / "a.sock", "--config", str(config)),
    )
    one_line_error(result, fragment)


def test_reserved_cpus_that_do_not_exist_are_warned_about(short_tmp: Path) -> None:
    process = subprocess.Popen(
        [
            str(BIN / "dracpu-allocator"),
            *allocator_args(short_tmp, short_tmp / "a.sock", "--reserved-cpus", "0-7,100"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert process.stdout is not None
        seen = []
        for line in process.stdout:
            seen.append(line)
            if "allocator serving" in line:
                break
        text = "".join(seen)
        assert "does not have" in text and "100" in text
        assert "covers every online CPU" in text
    finally:
        process.terminate()
        process.wait(timeout=10)


async def test_the_allocator_starts_past_a_fifo_and_an_oversized_record(short_tmp: Path) -> None:
    claims = short_tmp / "state" / "claims"
    claims.mkdir(parents=True)
    os.mkfifo(claims / "fifo.json")
    (claims / "big.json").write_bytes(b" " * (2 * 1024 * 1024))
    socket = short_tmp / "a.sock"
    log = short_tmp / "allocator.log"
    from harness.nri_bed import start_process, stop_process
    from harness.services import wait_serving

    process = start_process(
        [str(BIN / "dracpu-allocator"), *allocator_args(short_tmp, socket)], log
    )
    try:
        await wait_serving(socket, process, what="the allocator", log=log)
        Allocator(socket, short_tmp, process)
        text = log.read_text()
        assert "not a regular file" in text and "at most" in text
    finally:
        stop_process(process)


@pytest.mark.parametrize(
    ("namespace", "name"),
    [("t", "cpus-1/../../../../tmp/victim"), ("../..", "x"), ("t", "a" * 300)],
    ids=["name-traversal", "namespace-traversal", "name-too-long"],
)
def test_metadata_paths_never_leave_their_directory(
    short_tmp: Path, namespace: str, name: str
) -> None:
    victim = short_tmp / "victim"
    victim.mkdir()
    (victim / "data").write_text("keep")
    writer = MetadataWriter("dra.cpu", short_tmp / "meta", short_tmp / "cdi")
    ref = ClaimRef(namespace=namespace, name=name, uid="u")
    with pytest.raises(InvalidInputError):
        ref.check()
    with pytest.raises(InvalidInputError):
        writer.remove(ref)
    assert (victim / "data").read_text() == "keep"


def test_a_service_module_refuses_a_socket_dir_on_the_command_line(short_tmp: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "dracpu.nri_plugin.main", "--socket", str(short_tmp)],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert "Traceback" not in result.stderr
    assert result.returncode == 2, result.stderr
