"""What the documentation tells a user to type is what the code accepts:

- every `dracpu ...` command line in a fenced block of README.md or docs/ (also as
  `.venv/bin/dracpu` or the pod's `/dracpu`) parses with that subcommand's own argparse parser,
  the one `dracpu` runs;
- every chart value the pages name exists in helm/dra-driver-cpu/values.schema.json: dotted
  keys in code (`driverConfig.groupBy`, `--set api.port=...`) and every key of a values YAML
  block (a block whose top-level keys are the chart's, not a Kubernetes object).

Pure text processing and argparse: no subprocess, no helm."""

from __future__ import annotations

import importlib
import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from helm_chart import CHART, schema_node
from test_docs import ROOT, pages, parse

from dracpu.core.cli import ArgumentParser, commands

SEPARATORS = {"|", "||", "&", "&&", ";", ">", ">>", "<", "2>", "2>&1", ")"}
DOTTED_KEY = re.compile(
    r"^(?:--set(?:-string)?[ =])?([a-z][A-Za-z0-9]*(?:\.[A-Za-z][A-Za-z0-9]*)+)(?:=.*)?$"
)
SET_ITEM = re.compile(r"--set(?:-string)?[ =]([A-Za-z][A-Za-z0-9.]*)=")


# Dotted names in the docs that look like values but are not: file names, a pod's own field.
FILE_SUFFIXES = (".sock", ".yaml", ".json", ".py", ".md", ".sh", ".txt")
POD_FIELDS = {"resources.claims"}
# Keys the docs name because the chart refuses them: they must stay out of the schema.
REFUSED = {"driverConfig.sysfsRoot"}


def chart_top_level_keys() -> set[str]:
    schema = yaml.safe_load((CHART / "values.schema.json").read_text())
    return set(schema["properties"])


TOP_LEVEL = chart_top_level_keys()


def fenced_blocks(path: Path) -> Iterator[tuple[int, list[str]]]:
    """Each fenced block of a page as (line number of its first line, its lines)."""
    code = parse(path).code
    block: list[str] = []
    start = previous = 0
    for number, line in code:
        if block and number != previous + 1:
            yield start, block
            block = []
        if not block:
            start = number
        block.append(line)
        previous = number
    if block:
        yield start, block


def command_lines(path: Path) -> Iterator[tuple[int, str]]:
    """The shell lines of a page's fenced blocks, continuation lines joined."""
    for start, block in fenced_blocks(path):
        pending = ""
        for offset, line in enumerate(block):
            text = line.strip().removeprefix("$ ")
            if text.endswith("\\"):
                pending += text[:-1] + " "
                continue
            yield start + offset, pending + text
            pending = ""


def dracpu_invocations() -> list[tuple[str, list[str]]]:
    """(page:line, the arguments after `dracpu`) of every dracpu command line in the docs."""
    found = []
    for path in pages():
        for number, line in command_lines(path):
            if not re.search(r"(^|[\s/])dracpu\s", line):
                continue
            try:
                words = shlex.split(line, comments=True)
            except ValueError:
                continue  # not shell (an unbalanced quote in prose-like output)
            for index, word in enumerate(words):
                if word == "dracpu" or word.endswith("/dracpu"):
                    args = []
                    for arg in words[index + 1 :]:
                        if arg in SEPARATORS or arg.startswith((">", "<")):
                            break
                        args.append(arg)
                    found.append((f"{path.relative_to(ROOT)}:{number}", args))
    return found


INVOCATIONS = dracpu_invocations()


def parser_of(command: str) -> ArgumentParser:
    entry = commands()[command]
    module = importlib.import_module(entry.module)
    parser: ArgumentParser = module.build_parser()
    return parser


def test_the_docs_show_dracpu_commands() -> None:
    used = {args[0] for _, args in INVOCATIONS if args}
    assert {"dev", "simulate", "gatherinfo", "introspect", "validate"} <= used


@pytest.mark.parametrize("command", sorted(commands()))
def test_every_dracpu_subcommand_exposes_its_parser(command: str) -> None:
    assert isinstance(parser_of(command), ArgumentParser)


@pytest.mark.parametrize(
    "args", [args for _, args in INVOCATIONS], ids=[where for where, _ in INVOCATIONS]
)
def test_every_dracpu_command_line_in_the_docs_parses(
    args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert args, "`dracpu` without a command"
    command, rest = args[0], args[1:]
    if command == "version":
        assert rest == []
        return
    assert command in commands(), f"unknown command {command!r}"
    try:
        parser_of(command).parse_args(rest)
    except SystemExit as exit:
        pytest.fail(f"dracpu {shlex.join(args)}: exit {exit.code}: {capsys.readouterr().err}")


def spans_and_lines(path: Path) -> Iterator[tuple[int, str]]:
    """Code spans of the prose and lines of fenced blocks."""
    page = parse(path)
    yield from page.code_spans()
    yield from page.code


def value_keys_named() -> list[tuple[str, str]]:
    """(page:line, key) of every chart value named in code: a dotted key whose first part is a
    top-level value, alone in a code span, or given to `--set`."""
    found = []
    for path in pages():
        for number, text in spans_and_lines(path):
            keys = set(SET_ITEM.findall(text))
            match = DOTTED_KEY.match(text.strip())
            if match:
                keys.add(match.group(1))
            for key in sorted(keys):
                if key.endswith(FILE_SUFFIXES) or key in POD_FIELDS:
                    continue
                if key.split(".")[0] in TOP_LEVEL:
                    found.append((f"{path.relative_to(ROOT)}:{number}", key))
    return found


def leaf_paths(value: Any, prefix: str = "") -> Iterator[str]:
    if isinstance(value, dict) and value:
        for key, inner in value.items():
            yield from leaf_paths(inner, f"{prefix}.{key}" if prefix else str(key))
    elif prefix:
        yield prefix


def values_blocks() -> list[tuple[str, dict[str, Any]]]:
    """(page:line, document) of the YAML blocks that are chart values: a mapping whose
    top-level keys include the chart's and that is no Kubernetes object or config file."""
    found = []
    for path in pages():
        for start, block in fenced_blocks(path):
            try:
                document = yaml.safe_load("\n".join(block))
            except yaml.YAMLError:
                continue
            if not isinstance(document, dict) or "apiVersion" in document:
                continue
            if set(map(str, document)) & TOP_LEVEL:
                found.append((f"{path.relative_to(ROOT)}:{start}", document))
    return found


KEYS = value_keys_named()
BLOCKS = values_blocks()


def test_the_docs_name_chart_values() -> None:
    named = {key for _, key in KEYS}
    assert {"driverConfig.minSharedCPUs", "api.networkPolicy.from", "args.logLevel"} <= named
    assert BLOCKS


@pytest.mark.parametrize("key", [k for _, k in KEYS], ids=[f"{w} {k}" for w, k in KEYS])
def test_every_chart_value_the_docs_name_is_in_the_schema(key: str) -> None:
    if key in REFUSED:
        assert schema_node(key) is None, f"the docs say the chart refuses {key}"
    else:
        assert schema_node(key) is not None, f"{key} is not a value of the chart"


@pytest.mark.parametrize("document", [d for _, d in BLOCKS], ids=[where for where, _ in BLOCKS])
def test_every_key_of_a_values_block_is_in_the_schema(document: dict[str, Any]) -> None:
    unknown = [path for path in leaf_paths(document) if schema_node(path) is None]
    assert unknown == []
