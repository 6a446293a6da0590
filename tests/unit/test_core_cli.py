"""Command-line conventions: one stderr line and exit 2 for bad input, never a traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest

from dracpu.core import __version__, cli
from dracpu.core.errors import (
    ConfigError,
    DracpuError,
    InsufficientCPUsError,
    TopologyError,
    UnavailableError,
)


def run_dracpu(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dracpu.core.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_parser_errors_are_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    parser = cli.ArgumentParser(prog="tool")
    parser.add_argument("--count", type=int)
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args(["--count", "many"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err == "tool: error: argument --count: invalid int value: 'many'\n"


def fail(error: BaseException) -> int:
    raise error


@pytest.mark.parametrize(
    ("error", "code", "line"),
    [
        (
            ConfigError("config file x: unknown field 'y'"),
            2,
            "tool: error: config file x: unknown field 'y'",
        ),
        (
            TopologyError("sysfs root /x does not exist"),
            2,
            "tool: error: sysfs root /x does not exist",
        ),
        (
            UnavailableError("allocator: connection refused"),
            2,
            "tool: error: allocator: connection refused",
        ),
        (DracpuError("anything"), 2, "tool: error: anything"),
        (InsufficientCPUsError("need 8 CPUs, 4 free"), 1, "tool: need 8 CPUs, 4 free"),
    ],
    ids=["config", "topology", "unavailable", "base", "insufficient"],
)
def test_errors_map_to_one_line_and_exit_code(
    error: DracpuError, code: int, line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.run(lambda: fail(error), "tool") == code
    captured = capsys.readouterr()
    assert captured.err == line + "\n"
    assert captured.out == ""


def test_interrupt_exits_130() -> None:
    assert cli.run(lambda: fail(KeyboardInterrupt()), "tool") == 130


def test_async_bodies_are_mapped_too(capsys: pytest.CaptureFixture[str]) -> None:
    async def body() -> int:
        raise TopologyError("no CPUs")

    assert cli.run_async(body, "tool") == 2
    assert capsys.readouterr().err == "tool: error: no CPUs\n"


def test_unknown_command_is_one_line_exit_2() -> None:
    result = run_dracpu("frobnicate")
    assert result.returncode == 2
    assert result.stderr == "dracpu: error: unknown command 'frobnicate'\n"


def test_version() -> None:
    result = run_dracpu("version")
    assert result.returncode == 0
    assert result.stdout.strip() == __version__


def test_help_lists_the_subcommands(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in cli.SUBCOMMANDS:
        assert name in out


def test_no_command_is_usage_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([]) == 2
    assert "usage: dracpu <command>" in capsys.readouterr().out


def test_gatherinfo_is_a_subcommand() -> None:
    result = run_dracpu("gatherinfo", "--no-such-flag")
    assert result.returncode == 2
    assert result.stderr == "dracpu gatherinfo: error: unrecognized arguments: --no-such-flag\n"
