"""Bad input to `dracpu dev` is one line on stderr and exit code 2, before anything starts."""

from __future__ import annotations

import re
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from dracpu.core.cli import commands, main
from dracpu.dev import cli as dev_cli

RUN_DIR = "{run_dir}"


@pytest.fixture
def run_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(dir="/tmp", prefix="ddc-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def invoke(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse exits through ArgumentParser.error
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param([], "the following arguments are required: COMMAND", id="no-command"),
        pytest.param(["claim"], "the following arguments are required: --cpus", id="no-cpus"),
        pytest.param(["claim", "--cpus", "0"], "must be a positive number, got 0", id="zero"),
        pytest.param(["claim", "--cpus", "two"], "invalid count 'two'", id="not-a-number"),
        pytest.param(["claim", "--cpus", "1", "--numa", "-1"], "must not be negative", id="numa"),
        pytest.param(
            ["claim", "--cpus", "1", "--name", "Bad_Name", "--run-dir", RUN_DIR],
            "claim name 'Bad_Name' is not a DNS label",
            id="bad-name",
        ),
        pytest.param(
            ["claim", "--cpus", "2", "--cpuset", "0-2", "--run-dir", RUN_DIR],
            "--cpuset 0-2 has 3 CPUs, --cpus says 2",
            id="cpuset-size",
        ),
        pytest.param(
            ["claim", "--cpus", "2", "--cpuset", "3-1", "--run-dir", RUN_DIR],
            "reversed range '3-1'",
            id="cpuset-syntax",
        ),
        pytest.param(
            ["claim", "--cpus", "1", "--run-dir", RUN_DIR],
            "no dracpu dev up is running on {run_dir}",
            id="claim-without-up",
        ),
        pytest.param(
            ["claim", "--cpus", "1", "--memory", "lots", "--run-dir", RUN_DIR],
            "--memory: 'lots' is not a quantity",
            id="memory-not-a-quantity",
        ),
        pytest.param(
            ["claim", "--cpus", "1", "--memory", "0", "--run-dir", RUN_DIR],
            "--memory: must be a positive whole number of bytes, got 0",
            id="memory-zero",
        ),
        pytest.param(
            ["claim", "--cpus", "1", "--hugepages", "32Mi", "--run-dir", RUN_DIR],
            "--hugepages 32Mi: expected SIZE=QUANTITY, e.g. 2Mi=64Mi",
            id="hugepages-without-size",
        ),
        pytest.param(
            ["claim", "--cpus", "1", "--hugepages", "2Mi=3Mi", "--run-dir", RUN_DIR],
            "--hugepages 2Mi=3Mi: 3Mi is not a whole number of 2Mi pages",
            id="hugepages-part-page",
        ),
        pytest.param(
            [
                "claim",
                "--cpus",
                "1",
                "--hugepages",
                "2Mi=4Mi",
                "--hugepages",
                "2048Ki=2Mi",
                "--run-dir",
                RUN_DIR,
            ],
            "--hugepages: page size 2Mi is given twice",
            id="hugepages-size-twice",
        ),
        pytest.param(
            ["claim", "--cpus", "1", "--hugepages", "big=2Mi", "--run-dir", RUN_DIR],
            "--hugepages big=2Mi: 'big' is not a quantity",
            id="hugepages-bad-size",
        ),
        pytest.param(
            ["claim", "--cpus", "1", "--hugepages", "2Mi=32Mi", "--run-dir", RUN_DIR],
            "no dracpu dev up is running on {run_dir}",
            id="hugepages-without-up",
        ),
        pytest.param(["release"], "the following arguments are required: NAME", id="no-name"),
        pytest.param(
            ["release", "cpus-1", "--run-dir", RUN_DIR],
            "no dracpu dev up is running on {run_dir}",
            id="release-without-up",
        ),
        pytest.param(
            ["up", "--run-dir", RUN_DIR, "--fixture", "no-such-machine"],
            "--fixture 'no-such-machine': unknown fixture (known: ",
            id="unknown-fixture",
        ),
        pytest.param(
            ["up", "--fixture", "small-vm", "--sysfs-root", "/sys"],
            "argument --sysfs-root: not allowed with argument --fixture",
            id="fixture-and-sysfs",
        ),
        pytest.param(
            ["up", "--run-dir", RUN_DIR, "--sysfs-root", "/no/such/dir"],
            "--sysfs-root /no/such/dir: not a directory",
            id="missing-sysfs",
        ),
        pytest.param(
            ["up", "--run-dir", RUN_DIR, "--api-address", "localhost"],
            "--api-address 'localhost': expected HOST:PORT with a port 1-65535",
            id="address-without-port",
        ),
        pytest.param(
            ["up", "--run-dir", RUN_DIR, "--api-address", "127.0.0.1:70000"],
            "expected HOST:PORT with a port 1-65535",
            id="port-out-of-range",
        ),
        pytest.param(
            ["up", "--run-dir", RUN_DIR, "--config", "/no/such/config.yaml"],
            "config file /no/such/config.yaml: No such file or directory",
            id="missing-config",
        ),
        pytest.param(
            ["up", "--run-dir", "/tmp/" + "x" * 90],
            "is too deep: unix socket path",
            id="run-dir-too-deep",
        ),
        pytest.param(["up", "--ready-timeout", "0"], "must be positive", id="timeout"),
        pytest.param(
            ["up", "--run-dir", RUN_DIR, "--kubeconfig", "/no/such/kubeconfig"],
            "--kubeconfig /no/such/kubeconfig: No such file or directory",
            id="missing-kubeconfig",
        ),
        pytest.param(
            ["prepare", "--run-dir", RUN_DIR, "c1"],
            "no dracpu dev up is running on",
            id="prepare-without-up",
        ),
        pytest.param(
            ["--compose", "claim", "--run-dir", RUN_DIR, "--cpus", "2"],
            f"no compose stack serves {RUN_DIR}: {RUN_DIR}/sockets/kubelet-sim.sock is missing",
            id="compose-claim-without-stack",
        ),
        pytest.param(
            ["--compose", "release", "--run-dir", RUN_DIR, "cpus-1"],
            "no compose stack serves",
            id="compose-release-without-stack",
        ),
        pytest.param(
            ["--compose", "up", "--run-dir", RUN_DIR],
            "--compose: only claim and release, not up",
            id="compose-up",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    argv: list[str], message: str, run_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [arg.replace(RUN_DIR, str(run_dir)) for arg in argv]
    code, out, err = invoke(["dev", *argv], capsys)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1
    assert re.match(r"dracpu dev( (up|claim|release|status|prepare))?: error: ", err)
    assert message.replace(RUN_DIR, str(run_dir)) in err


def test_a_config_with_an_unknown_field_is_refused_before_starting(
    run_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = run_dir / "config.yaml"
    config.write_text("cpuDeviceMode: grouped\nnoSuchField: 1\n")
    code, _, err = invoke(["dev", "up", "--run-dir", str(run_dir), "--config", str(config)], capsys)
    assert (code, err) == (
        2,
        f"dracpu dev: error: config file {config}: unknown field 'noSuchField'\n",
    )
    assert not (run_dir / "logs").exists()


def test_an_api_address_in_use_is_refused_before_starting(
    run_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        code, _, err = invoke(
            [
                "dev",
                "up",
                "--run-dir",
                str(run_dir),
                "--fixture",
                "small-vm",
                "--api-address",
                address,
            ],
            capsys,
        )
    assert (code, err) == (2, f"dracpu dev: error: --api-address {address} is in use\n")
    assert not list((run_dir / "logs").glob("*.log"))


def test_status_of_a_run_dir_with_nothing_running(
    run_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = invoke(["dev", "status", "--run-dir", str(run_dir)], capsys)
    assert (code, out) == (1, f"no dracpu dev up is running on {run_dir}\n")


def test_dev_is_a_subcommand_of_the_whole_distribution(capsys: pytest.CaptureFixture[str]) -> None:
    # Declared by setup.py for the dev folder (entry point group dracpu.commands).
    assert commands()["dev"].value == "dracpu.dev.cli:main"
    code, out, _ = invoke(["--help"], capsys)
    assert code == 0
    assert f"  dev          {dev_cli.SUMMARY}\n" in out
