"""Every place that spells out the driver configuration agrees with its one model
(dracpu.core.config_model): the chart's values.schema.json is the generated one, values.yaml lists
every field the chart takes at its default, the chart folds exactly the deprecated `args.*` the
model names, and docs/user/configuration.md lists every field (its choices and default) and every
flag of every service.

Pure text processing and argparse: no subprocess but the generator's own check, no helm."""

from __future__ import annotations

import argparse
import importlib
import json
import re
import subprocess
import sys
from typing import Any

import pytest
import yaml
from helm_chart import CHART, ROOT

from dracpu.core.config_model import FIELDS, ConfigField
from dracpu.core.config_schema import dump, values_schema
from dracpu.core.flags import add_config_flags

SCHEMA = CHART / "values.schema.json"
VALUES = CHART / "values.yaml"
REFERENCE = ROOT / "docs" / "user" / "configuration.md"
CHART_FIELDS = [field for field in FIELDS if field.values_key]

# Each service's command and the module whose build_parser() makes its command line.
SERVICE_FLAGS = {
    "dracpu-topology": "dracpu.topology.flags",
    "dracpu-allocator": "dracpu.allocator.flags",
    "dracpu-dra-plugin": "dracpu.dra_plugin.flags",
    "dracpu-nri-plugin": "dracpu.nri_plugin.flags",
    "dracpu-api": "dracpu.api.flags",
}
CODE_SPAN = re.compile(r"`([^`]+)`")


def spelled(value: Any) -> str:
    """A default as the pages and values.yaml write it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value == "":
        return '""'
    return str(value)


# ---- the chart --------------------------------------------------------------------------------


def test_the_committed_values_schema_is_the_generated_one() -> None:
    committed = SCHEMA.read_text(encoding="utf-8")
    assert committed == dump(values_schema(json.loads(committed))), "run tools/gen-values-schema.py"
    check = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "gen-values-schema.py"), "--check"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert (check.returncode, check.stderr) == (0, "")


def test_the_schema_takes_exactly_the_fields_the_chart_exposes() -> None:
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    driver_config = schema["properties"]["driverConfig"]
    assert driver_config["additionalProperties"] is False
    assert list(driver_config["properties"]) == [f.spelling for f in CHART_FIELDS]
    assert "sysfsRoot" not in driver_config["properties"]  # the chart owns the sysfs root
    args = schema["properties"]["args"]["properties"]
    for field in FIELDS:
        assert (field.spelling in args) == field.chart_deprecated, field.spelling


def commented_driver_config() -> dict[str, Any]:
    """The commented `# driverConfig:` block under `driverConfig: {}` in values.yaml."""
    lines = VALUES.read_text(encoding="utf-8").splitlines()
    start = lines.index("# driverConfig:")
    block = ["driverConfig:"]
    for line in lines[start + 1 :]:
        if not line.startswith("#   "):
            break
        block.append(line[1:])
    document: dict[str, Any] = yaml.safe_load("\n".join(block))
    return document["driverConfig"]


def test_values_yaml_lists_every_chart_field_at_its_default() -> None:
    listed = commented_driver_config()
    assert list(listed) == [f.spelling for f in CHART_FIELDS]
    assert listed == {f.spelling: f.document_default for f in CHART_FIELDS}


def test_the_chart_folds_exactly_the_deprecated_args_of_the_model() -> None:
    helpers = (CHART / "templates" / "_helpers.tpl").read_text(encoding="utf-8")
    (folded,) = re.findall(r'range \$field := list ((?:"\w+" ?)+)', helpers)
    assert folded.split() == [f'"{f.spelling}"' for f in FIELDS if f.chart_deprecated]
    values = yaml.safe_load(VALUES.read_text(encoding="utf-8"))
    for field in FIELDS:
        assert (field.spelling in values["args"]) == field.chart_deprecated, field.spelling


# ---- docs/user/configuration.md --------------------------------------------------------------


def section(text: str, heading: str) -> str:
    """The text under `heading` up to the next heading of the same or a higher level."""
    level = heading.split(" ")[0]
    start = text.index(f"\n{heading}\n") + len(heading) + 2
    ends = [m.start() for m in re.finditer(r"\n(#+) ", text[start:]) if len(m[1]) <= len(level)]
    return text[start : start + ends[0]] if ends else text[start:]


def field_rows() -> dict[str, list[str]]:
    """The table of "The config file": field -> its cells (type, default, meaning)."""
    rows: dict[str, list[str]] = {}
    for line in section(REFERENCE.read_text(encoding="utf-8"), "## The config file").splitlines():
        cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]]
        if cells and (name := re.fullmatch(r"`(\w+)`", cells[0])):
            rows[name[1]] = cells[1:]
    return rows


def test_the_reference_lists_every_field_of_the_model() -> None:
    assert set(field_rows()) == {field.spelling for field in FIELDS}


@pytest.mark.parametrize("field", FIELDS, ids=lambda f: f.spelling)
def test_the_reference_gives_each_fields_choices_and_default(field: ConfigField) -> None:
    kind, default, _ = field_rows()[field.spelling]
    if field.choices:
        assert CODE_SPAN.findall(kind) == list(field.choices)
    assert CODE_SPAN.findall(default)[0] == spelled(field.document_default)


def documented_flags(text: str) -> set[str]:
    """The flags a part of the page names: the first word of each code span that is a flag."""
    spans = (
        span.split()[0]
        for line in text.splitlines()  # a table's code spans end on their line
        for span in CODE_SPAN.findall(line)
        if span.strip()
    )
    return {span for span in spans if span.startswith("-")}


def options(parser: argparse.ArgumentParser) -> set[str]:
    return {option for action in parser._actions for option in action.option_strings}


def test_the_flags_every_service_takes_are_in_their_section() -> None:
    parser = argparse.ArgumentParser(prog="any")
    add_config_flags(parser)
    page = REFERENCE.read_text(encoding="utf-8")
    missing = options(parser) - documented_flags(section(page, "## Flags every service takes"))
    assert missing == set()


@pytest.mark.parametrize("prog", SERVICE_FLAGS)
def test_every_flag_of_every_service_is_in_the_reference(prog: str) -> None:
    parser = importlib.import_module(SERVICE_FLAGS[prog]).build_parser()
    assert parser.prog == prog
    page = REFERENCE.read_text(encoding="utf-8")
    each = section(page, "## Flags of each service")
    where = (
        section(page, "## Flags every service takes")
        + each[: each.index("\n### ")]  # what the sections of every service share
        + section(page, f"### {prog}")
    )
    assert options(parser) - documented_flags(where) == set()


def test_the_flag_check_can_fail() -> None:
    parser = argparse.ArgumentParser(prog="any")
    parser.add_argument("--not-in-the-reference")
    assert options(parser) - documented_flags(REFERENCE.read_text(encoding="utf-8")) == {
        "--not-in-the-reference"
    }
