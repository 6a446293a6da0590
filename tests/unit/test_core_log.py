"""Logging: key=value lines, and `-v N` showing every line at level <= N."""

from __future__ import annotations

import io
import re
from collections.abc import Iterator

import pytest

from dracpu.core import log

LINE = re.compile(
    r"^ts=\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z level=(\w+) v=(\d+) service=(\S+) logger=(\S+) "
)


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    yield io.StringIO()
    log.setup(0)


def emit_all(logger: log.Logger) -> None:
    for level in (0, 2, 4, 6):
        logger.info(level, f"info at {level}")
    logger.warning("a warning")
    logger.error("an error")


@pytest.mark.parametrize(
    ("verbosity", "shown"),
    [(0, [0]), (1, [0]), (2, [0, 2]), (4, [0, 2, 4]), (6, [0, 2, 4, 6]), (10, [0, 2, 4, 6])],
)
def test_verbosity_shows_lines_up_to_its_level(
    verbosity: int, shown: list[int], stream: io.StringIO
) -> None:
    log.setup(verbosity, "svc", stream=stream)
    emit_all(log.get_logger("levels"))
    lines = stream.getvalue().splitlines()
    infos = [int(m.group(2)) for m in map(LINE.match, lines) if m and m.group(1) == "info"]
    assert infos == shown
    # Warnings and errors are level 0: always shown.
    assert [m.group(1) for m in map(LINE.match, lines[-2:]) if m] == ["warning", "error"]


def test_line_format(stream: io.StringIO) -> None:
    log.setup(2, "allocator", stream=stream)
    log.get_logger("claims").info(
        2, "claim prepared", claim="ns/a", cpus="0-3", empty="", spaced="a b", quoted='say "hi"'
    )
    line = stream.getvalue().rstrip("\n")
    match = LINE.match(line)
    assert match is not None
    assert match.groups() == ("info", "2", "allocator", "claims")
    assert line.endswith(
        'msg="claim prepared" claim=ns/a cpus=0-3 empty="" spaced="a b" quoted="say \\"hi\\""'
    )


def test_one_line_per_event_even_with_newlines(stream: io.StringIO) -> None:
    log.setup(0, "svc", stream=stream)
    log.get_logger("x").warning("multi\nline", detail="a\nb")
    assert len(stream.getvalue().splitlines()) == 1


def test_tracebacks_only_at_level_6(stream: io.StringIO) -> None:
    logger = log.get_logger("trace")
    for verbosity, expect_trace in ((0, False), (6, True)):
        stream.seek(0)
        stream.truncate()
        log.setup(verbosity, "svc", stream=stream)
        try:
            raise RuntimeError("boom")
        except RuntimeError:
            logger.error("failed", exc_info=True)
        assert ("Traceback" in stream.getvalue()) is expect_trace


def test_enabled_reflects_verbosity(stream: io.StringIO) -> None:
    log.setup(4, "svc", stream=stream)
    logger = log.get_logger("e")
    assert logger.enabled(4)
    assert not logger.enabled(6)
    assert log.verbosity() == 4


@pytest.mark.parametrize("verbosity", [-1, 11])
def test_out_of_range_verbosity_is_refused(verbosity: int) -> None:
    with pytest.raises(ValueError, match="verbosity must be 0-10"):
        log.setup(verbosity)
