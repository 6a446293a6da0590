"""The shape of the tests: one `stack` fixture per peer, in the harness; every wait through
tests/harness/waits.py (`wait_for`, `eventually`, `never`), none hand-written around a clock; no
fixed sleep right before an assertion, where it would stand in for "nothing happened" and pass
on a slow machine without testing anything."""

from __future__ import annotations

import ast
import functools
import itertools
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
HARNESS = TESTS / "harness"
WAITS = HARNESS / "waits.py"
# Loops that read a clock and are no wait, each with the reason.
CLOCK_LOOPS = {
    "nri_plugin/test_nri_push.py": "the stand-in runtime applies updates until its request "
    "deadline, as the runtime's ttrpc context does: the peer's behaviour, not a test waiting",
    "bignode/cluster_soak.py": "the soak injects faults for the minutes it is given, and its "
    "settles and retries end at the judge's convergence bound (already scaled to the "
    "machine's speed): a soak's own clock, not a test waiting on a condition",
}
CLOCKS = {"monotonic", "time"}  # time.monotonic(), loop.time(), time.time()


def sources() -> Iterator[Path]:
    for path in sorted(TESTS.rglob("*.py")):
        if "peers" not in path.relative_to(TESTS).parts[:1]:
            yield path


def rel(path: Path) -> str:
    return path.relative_to(TESTS).as_posix()


@functools.cache
def parsed(source: str) -> ast.Module:
    return ast.parse(source)


def _reads_a_clock(node: ast.AST) -> bool:
    for inner in ast.walk(node):
        if isinstance(inner, ast.Call):
            func = inner.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in CLOCKS and not inner.args:
                return True
        if isinstance(inner, ast.Name) and "deadline" in inner.id.lower():
            return True
    return False


def _ends_on_a_clock(loop: ast.For | ast.AsyncFor) -> bool:
    """A `for` that leaves (break, raise, return) when a clock or deadline says so."""
    return any(
        isinstance(inner, ast.If)
        and _reads_a_clock(inner.test)
        and any(isinstance(s, (ast.Break, ast.Raise, ast.Return)) for s in inner.body)
        for inner in ast.walk(loop)
    )


def clock_loops(source: str) -> list[int]:
    """Lines of the `while` loops that read a clock or a deadline, and of the `for` loops that
    end on one (a `for` that times each of its rounds is no wait)."""
    return [
        node.lineno
        for node in ast.walk(parsed(source))
        if (isinstance(node, ast.While) and _reads_a_clock(node))
        or (isinstance(node, (ast.For, ast.AsyncFor)) and _ends_on_a_clock(node))
    ]


def _is_sleep(statement: ast.stmt) -> bool:
    value = statement.value if isinstance(statement, ast.Expr) else None
    if isinstance(value, ast.Await):
        value = value.value
    if not isinstance(value, ast.Call):
        return False
    func = value.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    zero = value.args and isinstance(value.args[0], ast.Constant) and not value.args[0].value
    return name == "sleep" and bool(value.args) and not zero


def sleeps_before_asserts(source: str) -> list[int]:
    """Lines of the sleeps (for a time, not sleep(0): a yield to the event loop) whose next
    statement is an assertion."""
    found = []
    for node in ast.walk(parsed(source)):
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if not isinstance(block, list):
                continue
            for statement, following in itertools.pairwise(block):
                if _is_sleep(statement) and isinstance(following, ast.Assert):
                    found.append(statement.lineno)
    return found


def _reexport(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Its body (past a docstring) only returns one of its parameters: a fixture of the harness
    under the name a folder's tests use."""
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    params = {a.arg for a in node.args.args}
    return (
        len(body) == 1
        and isinstance(body[0], ast.Return)
        and isinstance(body[0].value, ast.Name)
        and body[0].value.id in params
    )


def stack_definitions(source: str) -> list[tuple[int, bool]]:
    """(line, is a re-export) of every function named `stack`."""
    return [
        (node.lineno, _reexport(node))
        for node in ast.walk(parsed(source))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "stack"
    ]


# ---- the detectors, on what they must and must not find --------------------------------------

LOOPS = {
    "monotonic-deadline": (
        """
        deadline = time.monotonic() + 5
        while not ready() and time.monotonic() < deadline:
            time.sleep(0.1)
        """,
        [3],
    ),
    "event-loop-clock": (
        """
        async def f():
            end = asyncio.get_running_loop().time() + 5
            while True:
                if asyncio.get_running_loop().time() > end:
                    raise AssertionError
        """,
        [4],
    ),
    "deadline-argument": (
        """
        def connect(deadline):
            while True:
                if over(deadline):
                    raise
        """,
        [3],
    ),
    "a-timing-is-no-loop": (
        """
        began = time.monotonic()
        run()
        took = time.monotonic() - began
        """,
        [],
    ),
    "a-count-is-no-clock": ("for i in range(3):\n    events.append(i)\n", []),
    "a-for-that-ends-on-the-clock": (
        """
        for update in updates:
            if loop.time() >= end:
                break
            apply(update)
        """,
        [2],
    ),
    "a-for-that-times-its-rounds": (
        """
        for path in paths:
            started = time.monotonic()
            get(path)
            assert time.monotonic() - started < 3
        """,
        [],
    ),
}


@pytest.mark.parametrize(("source", "lines"), LOOPS.values(), ids=LOOPS.keys())
def test_the_clock_loop_detector(source: str, lines: list[int]) -> None:
    assert clock_loops(textwrap.dedent(source)) == lines


SLEEPS = {
    "sleep-then-assert": ("time.sleep(3)\nassert calls == []\n", [1]),
    "awaited-sleep-then-assert": (
        "async def f():\n    await asyncio.sleep(0.5)\n    assert writes() == 0\n",
        [2],
    ),
    "a-yield-to-the-loop": ("async def f():\n    await asyncio.sleep(0)\n    assert x\n", []),
    "sleep-then-action": ("time.sleep(1)\nstart()\nassert up()\n", []),
    "a-sleep-for-a-given-while": ("await asyncio.sleep(seconds)\nassert same()\n", [1]),
}


@pytest.mark.parametrize(("source", "lines"), SLEEPS.values(), ids=SLEEPS.keys())
def test_the_sleep_before_an_assertion_detector(source: str, lines: list[int]) -> None:
    assert sleeps_before_asserts(source) == lines


def test_the_stack_detector_tells_a_reexport_from_a_definition() -> None:
    source = textwrap.dedent(
        '''
        @pytest.fixture(scope="session")
        def stack(realnode_stack):
            """The bed, as this folder's tests call it."""
            return realnode_stack

        @pytest.fixture
        def stack():
            started = start_stack()
            yield started
        '''
    )
    assert stack_definitions(source) == [(3, True), (8, False)]


# ---- the tests' shape -------------------------------------------------------------------------


def test_stack_fixtures_are_defined_in_the_harness_and_only_reexported_by_a_conftest() -> None:
    misplaced = {
        f"{rel(path)}:{line}"
        for path in sources()
        for line, reexport in stack_definitions(path.read_text(encoding="utf-8"))
        if not path.is_relative_to(HARNESS) and not (path.name == "conftest.py" and reexport)
    }
    assert misplaced == set(), "define a peer's stack in tests/harness; a conftest exposes it"


def test_one_stack_per_harness_module() -> None:
    per_module = {
        rel(path): len(found)
        for path in HARNESS.glob("*.py")
        if len(found := stack_definitions(path.read_text(encoding="utf-8"))) > 1
    }
    assert per_module == {}


def test_every_wait_goes_through_the_harness_waits() -> None:
    loops = {
        f"{rel(path)}:{line}"
        for path in sources()
        if path != WAITS and rel(path) not in CLOCK_LOOPS
        for line in clock_loops(path.read_text(encoding="utf-8"))
    }
    assert loops == set(), "wait with harness.waits (wait_for, eventually, never)"


def test_every_allowed_clock_loop_is_still_there() -> None:
    stale = {
        name for name in CLOCK_LOOPS if not clock_loops((TESTS / name).read_text(encoding="utf-8"))
    }
    assert stale == set(), "drop the allowance of a loop that is gone"


def test_no_fixed_sleep_stands_right_before_an_assertion() -> None:
    sleeps = {
        f"{rel(path)}:{line}"
        for path in sources()
        for line in sleeps_before_asserts(path.read_text(encoding="utf-8"))
    }
    assert sleeps == set(), "wait on the event (harness.waits.never), not for a while"
