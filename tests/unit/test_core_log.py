"""Logging: klog's text format by default, component-base JSON or logfmt on request, and
`-v N` showing every line at level <= N. The lines are read with parsers written from the
formats' definitions (tests/logformats.py)."""

from __future__ import annotations

import io
import logging
import os
import time
from collections.abc import Iterator

import pytest
from logformats import json_lines, klog_lines, parse_klog

from dracpu.core import log, operation


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
    lines = klog_lines(stream.getvalue())
    infos = [int(line.msg.rpartition(" ")[2]) for line in lines if line.severity == "I"]
    assert infos == shown
    # Warnings and errors are level 0: always shown.
    assert [line.severity for line in lines[-2:]] == ["W", "E"]


@pytest.mark.parametrize("verbosity", [0, 2, 4])
def test_json_lines_carry_their_verbosity(verbosity: int, stream: io.StringIO) -> None:
    log.setup(verbosity, "svc", stream=stream, fmt="json")
    emit_all(log.get_logger("levels"))
    entries = json_lines(stream.getvalue())
    assert [e["v"] for e in entries if "v" in e and e["msg"].startswith("info")] == [
        level for level in (0, 2, 4) if level <= verbosity
    ]


def test_klog_text_line(stream: io.StringIO) -> None:
    log.setup(2, "allocator", stream=stream)
    log.get_logger("claims").info(
        2,
        "claim prepared",
        claim="ns/a",
        cpus="0-3",
        empty="",
        spaced="a b",
        quoted='say "hi"',
        count=4,
        exclusive=True,
    )
    raw = stream.getvalue()
    line = parse_klog(raw.rstrip("\n"))
    assert (line.severity, line.pid, line.file, line.msg) == (
        "I",
        os.getpid(),
        "test_core_log.py",
        "claim prepared",
    )
    assert line.values == {
        "logger": "claims",
        "claim": "ns/a",
        "cpus": "0-3",
        "empty": "",
        "spaced": "a b",
        "quoted": 'say "hi"',
        "count": 4,
        "exclusive": True,
    }
    # Strings are always quoted, numbers and booleans never, as klog writes them.
    assert ' cpus="0-3" ' in raw and " count=4 " in raw and raw.rstrip().endswith("exclusive=true")


def test_klog_line_names_the_calling_line(stream: io.StringIO) -> None:
    log.setup(0, "svc", stream=stream)
    log.get_logger("here").warning("where am I")
    expected = test_klog_line_names_the_calling_line.__code__.co_firstlineno + 2
    line = parse_klog(stream.getvalue().rstrip("\n"))
    assert (line.file, line.line, line.severity) == ("test_core_log.py", expected, "W")


def test_json_line(stream: io.StringIO) -> None:
    log.setup(2, "allocator", stream=stream, fmt="json")
    logger = log.get_logger("claims")
    logger.info(2, "claim prepared", claim="ns/a", count=4)
    logger.error("claim failed", err="no CPUs")
    info, error = json_lines(stream.getvalue())
    assert info["msg"] == "claim prepared" and info["v"] == 2
    assert info["caller"].startswith("test_core_log.py:")
    assert (info["claim"], info["count"], info["logger"]) == ("ns/a", 4, "claims")
    # component-base writes no verbosity on error lines.
    assert "v" not in error and error["err"] == "no CPUs"
    assert abs(info["ts"] / 1000 - time.time()) < 60


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_a_librarys_warnings_come_out_in_the_same_format(
    fmt: log.LogFormat, stream: io.StringIO
) -> None:
    log.setup(0, "api", stream=stream, fmt=fmt)
    logging.getLogger("uvicorn.error").warning("slow client %s", "1.2.3.4")
    logging.getLogger("asyncio").info("below WARNING: not shown")
    if fmt == "text":
        (line,) = klog_lines(stream.getvalue())
        assert (line.severity, line.msg, line.values) == (
            "W",
            "slow client 1.2.3.4",
            {"logger": "uvicorn.error"},
        )
    else:
        (entry,) = json_lines(stream.getvalue())
        assert (entry["msg"], entry["logger"]) == ("slow client 1.2.3.4", "uvicorn.error")


def test_logfmt_stays_for_people(stream: io.StringIO) -> None:
    log.setup(2, "allocator", stream=stream, fmt="logfmt")
    log.get_logger("claims").info(2, "claim prepared", spaced="a b")
    line = stream.getvalue()
    assert line.startswith("ts=") and " level=info v=2 service=allocator logger=claims " in line
    assert line.rstrip().endswith('msg="claim prepared" spaced="a b"')


def test_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="logging format must be one of text, json, logfmt"):
        log.setup(0, fmt="xml")  # type: ignore[arg-type]


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_one_line_per_event_even_with_newlines(fmt: log.LogFormat, stream: io.StringIO) -> None:
    log.setup(0, "svc", stream=stream, fmt=fmt)
    log.get_logger("x").warning("multi\nline", detail="a\nb", tab="a\tb")
    if fmt == "text":
        (line,) = klog_lines(stream.getvalue())
        assert (line.msg, line.values["detail"], line.values["tab"]) == (
            "multi\nline",
            "a\nb",
            "a\tb",
        )
    else:
        (entry,) = json_lines(stream.getvalue())
        assert (entry["msg"], entry["detail"]) == ("multi\nline", "a\nb")


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
        (line,) = klog_lines(stream.getvalue())
        assert ("Traceback" in str(line.values.get("stacktrace", ""))) is expect_trace


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


@pytest.mark.parametrize("fmt", ["text", "json", "logfmt"])
def test_lines_during_an_operation_carry_its_id_first_after_the_logger(
    fmt: log.LogFormat, stream: io.StringIO
) -> None:
    log.setup(2, "allocator", stream=stream, fmt=fmt)
    logger = log.get_logger("claims")
    with operation.bound("5e1f0c2a9b7d"):
        logger.info(2, "claim prepared", claim="ns/a")
        logger.error("claim failed", claim="ns/b")
    logger.info(2, "after", claim="ns/c")
    raw = stream.getvalue()
    if fmt == "text":
        values = [line.values for line in klog_lines(raw)]
        assert [list(v)[:3] for v in values] == [
            ["logger", "opID", "claim"],
            ["logger", "opID", "claim"],
            ["logger", "claim"],
        ]
        assert [v.get("opID") for v in values] == ["5e1f0c2a9b7d", "5e1f0c2a9b7d", None]
    elif fmt == "json":
        entries = json_lines(raw)
        assert [e.get("opID") for e in entries] == ["5e1f0c2a9b7d", "5e1f0c2a9b7d", None]
        assert list(entries[0])[-3:] == ["logger", "opID", "claim"]
    else:
        first, second, third = raw.splitlines()
        assert 'msg="claim prepared" opID=5e1f0c2a9b7d claim=ns/a' in first
        assert "opID=5e1f0c2a9b7d" in second and "opID" not in third


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_a_librarys_line_during_an_operation_carries_its_id(
    fmt: log.LogFormat, stream: io.StringIO
) -> None:
    log.setup(0, "api", stream=stream, fmt=fmt)
    with operation.bound("0a1b2c3d4e5f"):
        logging.getLogger("grpc.aio").warning("something odd")
    if fmt == "text":
        (line,) = klog_lines(stream.getvalue())
        assert line.values == {"logger": "grpc.aio", "opID": "0a1b2c3d4e5f"}
    else:
        (entry,) = json_lines(stream.getvalue())
        assert entry["opID"] == "0a1b2c3d4e5f"


def test_an_operation_set_in_a_nested_block_ends_with_it(stream: io.StringIO) -> None:
    log.setup(0, "svc", stream=stream)
    logger = log.get_logger("nest")
    with operation.scope() as outer:
        with operation.scope() as inner:
            logger.warning("inner")
        with operation.bound(None):
            logger.warning("none")
        logger.warning("outer")
    assert inner == outer  # a scope inside an operation keeps it
    assert [line.values.get("opID") for line in klog_lines(stream.getvalue())] == [
        outer,
        None,
        outer,
    ]
