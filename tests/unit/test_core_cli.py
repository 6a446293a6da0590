"""Command-line conventions: one stderr line and exit 2 for bad input, never a traceback."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
import types
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest
from harness.commands import COMMANDS

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


def test_a_command_missing_what_it_imports_late_is_one_line_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An image holding a command but not all it imports once running: no traceback."""

    def main(argv: list[str]) -> int:
        raise ImportError("No module named 'dracpu.allocator'", name="dracpu.allocator")

    entry = types.SimpleNamespace(module="broken", attr="main")
    monkeypatch.setattr(cli, "commands", lambda: {"broken": entry})
    monkeypatch.setattr(cli, "_module", lambda command: types.SimpleNamespace(main=main))
    assert cli.main(["broken", "--flag"]) == 2
    assert capsys.readouterr().err == (
        "dracpu: error: command 'broken' needs dracpu.allocator, not installed here\n"
    )


def test_version() -> None:
    result = run_dracpu("version")
    assert result.returncode == 0
    assert result.stdout.strip() == __version__


def test_the_subcommands_are_the_distributions_entry_points() -> None:
    declared = cli.commands()
    assert {name: ep.value for name, ep in declared.items()} == COMMANDS
    assert {ep.group for ep in declared.values()} == {cli.COMMAND_GROUP}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_subcommand_has_a_main_and_a_one_line_summary(name: str) -> None:
    module = importlib.import_module(cli.commands()[name].module)
    assert callable(module.main)
    summary = module.SUMMARY
    assert isinstance(summary, str)
    assert summary and "\n" not in summary and len(summary) <= 70


def test_help_lists_the_subcommands_with_their_summaries(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(["--help"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[:3] == ["usage: dracpu <command> [options]", "", "commands:"]
    listed = [line.split(None, 1) for line in lines[3:]]
    expected = [
        [name, importlib.import_module(target.split(":")[0]).SUMMARY]
        for name, target in sorted(COMMANDS.items())
    ]
    assert listed == [*expected, ["version", "print the version"]]


def ghost(monkeypatch: pytest.MonkeyPatch) -> None:
    """Declares one more subcommand whose module this installation lacks: the entry point of
    a service that is not installed."""
    declared = cli.commands()
    declared["ghost"] = EntryPoint("ghost", "dracpu.no_such_service.cli:main", cli.COMMAND_GROUP)
    monkeypatch.setattr(cli, "commands", lambda: dict(sorted(declared.items())))


def test_help_leaves_out_a_subcommand_whose_module_is_missing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ghost(monkeypatch)
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "ghost" not in out
    assert "  simulate " in out


def test_a_subcommand_whose_module_is_missing_is_one_line_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ghost(monkeypatch)
    assert cli.main(["ghost", "--help"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        "dracpu: error: command 'ghost' is not installed here "
        "(No module named 'dracpu.no_such_service')\n"
    )


def test_the_dracpu_command_names_no_other_packages_module() -> None:
    # The subcommands come from the entry points alone: the core names no service's module.
    source = Path(cli.__file__).read_text()
    assert re.findall(r"dracpu\.(?!core\b|commands\b)\w+", source) == []


def test_no_command_is_usage_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([]) == 2
    assert "usage: dracpu <command>" in capsys.readouterr().out


def test_gatherinfo_is_a_subcommand() -> None:
    result = run_dracpu("gatherinfo", "--no-such-flag")
    assert result.returncode == 2
    assert result.stderr == "dracpu gatherinfo: error: unrecognized arguments: --no-such-flag\n"
