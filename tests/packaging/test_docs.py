"""The documentation holds together: README.md and every page under docs/.

- every relative link points to a file that exists, and every `#anchor` to a heading of the
  page it names (GitHub's slugs: lower case, punctuation dropped, spaces to hyphens, `-1`, `-2`
  for repeated headings);
- every `make <target>` quoted in code (a code span or a fenced block) is a target of the
  Makefile;
- README.md stays a first visit's length: at most 250 lines;
- every page under docs/ is reachable by links from README.md.

Pure text processing: no network, no subprocess.
"""

from __future__ import annotations

import re
import shlex
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
MAKEFILE = ROOT / "Makefile"
MAX_README_LINES = 250

FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)(?:\s+#+)?\s*$")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
LINK = re.compile(r"!?\[((?:[^\[\]]|\[[^\]]*\])*)\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
MAKE_RULE = re.compile(r"^([^\s#:=$][^:=$]*?)\s*::?(?!=)")
SHELL_SEPARATORS = {";", "&&", "||", "|", "&", "(", ")", "$("}
# make's options whose value is the next word (-j's is optional: only a number counts).
MAKE_OPTIONS_WITH_VALUE = {"-C", "-f", "-I", "-o", "-W", "--directory", "--file", "--makefile"}


def pages() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


def page_id(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


@dataclass(frozen=True)
class Page:
    """One Markdown file split into prose lines (code spans still in) and code."""

    path: Path
    prose: tuple[tuple[int, str], ...]  # (line number, text) outside fenced blocks
    code: tuple[tuple[int, str], ...]  # (line number, text) inside fenced blocks

    def code_spans(self) -> Iterator[tuple[int, str]]:
        for number, line in self.prose:
            for match in CODE_SPAN.finditer(line):
                yield number, match.group(2)

    def links(self) -> Iterator[tuple[int, str]]:
        for number, line in self.prose:
            for match in LINK.finditer(CODE_SPAN.sub("", line)):
                yield number, match.group(2)

    def headings(self) -> Iterator[str]:
        for _, line in self.prose:
            match = HEADING.match(line)
            if match:
                yield match.group(2)


@cache
def parse(path: Path) -> Page:
    prose: list[tuple[int, str]] = []
    code: list[tuple[int, str]] = []
    fence: str | None = None
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        opening = FENCE.match(line)
        if fence is None and opening:
            fence = opening.group(1)
        elif fence is not None and opening and opening.group(1).startswith(fence):
            fence = None
        elif fence is not None:
            code.append((number, line))
        else:
            prose.append((number, line))
    return Page(path, tuple(prose), tuple(code))


def heading_text(markdown: str) -> str:
    """What GitHub renders of a heading: link text without the target, code without its
    backticks, emphasis without its asterisks, no HTML tags."""
    text = LINK.sub(lambda m: m.group(1), markdown)
    text = re.sub(r"<[^>]+>", "", text)
    parts = CODE_SPAN.split(text)
    # split() gives [prose, ticks, code, prose, ticks, code, ...]
    rendered = []
    for index, part in enumerate(parts):
        kind = index % 3
        if kind == 0:
            rendered.append(part.replace("*", ""))
        elif kind == 2:
            rendered.append(part)
    return "".join(rendered)


def slug(text: str) -> str:
    """GitHub's anchor for a heading (github-slugger): lower-cased; every character that is not
    a letter, digit, mark, connector (`_`), hyphen or space dropped; spaces become hyphens."""
    kept = []
    for char in text.lower():
        category = unicodedata.category(char)
        if char in " -" or category[0] in "LNM" or category == "Pc":
            kept.append(char)
    return "".join(kept).replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    seen: dict[str, int] = {}
    found = set()
    for heading in parse(path).headings():
        base = slug(heading_text(heading))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return frozenset(found)


@cache
def make_targets() -> frozenset[str]:
    targets: set[str] = set()
    for line in MAKEFILE.read_text(encoding="utf-8").splitlines():
        if line.startswith(("\t", " ")):
            continue
        match = MAKE_RULE.match(line)
        if match:
            targets.update(name for name in match.group(1).split() if not name.startswith("."))
    return frozenset(targets)


def make_arguments(tokens: list[str], index: int) -> tuple[list[str], int]:
    """The targets among the words of one `make` command from `index` on, and where the
    command ends."""
    targets: list[str] = []
    while index < len(tokens) and tokens[index] not in SHELL_SEPARATORS:
        argument = tokens[index]
        following = tokens[index + 1] if index + 1 < len(tokens) else ""
        if argument in MAKE_OPTIONS_WITH_VALUE or (argument == "-j" and following.isdigit()):
            index += 1  # the option's value
        elif not argument.startswith("-") and "=" not in argument:
            targets.append(argument)
        index += 1
    return targets, index


def quoted_make_targets(command: str) -> list[str]:
    """The targets of every `make` invocation in one line of shell (comments ignored)."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    tokens = list(lexer)
    targets: list[str] = []
    command_start = True
    index = 0
    while index < len(tokens):
        token = tokens[index]
        if token in SHELL_SEPARATORS:
            command_start = True
        elif command_start and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", token):
            pass  # VAR=value before the command
        elif command_start and token == "make":
            found, index = make_arguments(tokens, index + 1)
            targets += found
            continue
        else:
            command_start = False
        index += 1
    return targets


def resolve(source: Path, target: str) -> tuple[Path, str]:
    file_part, _, anchor = target.partition("#")
    resolved = (source.parent / file_part).resolve() if file_part else source
    return resolved, anchor


@pytest.mark.parametrize("path", pages(), ids=page_id)
def test_every_relative_link_and_anchor_resolves(path: Path) -> None:
    broken = []
    for number, target in parse(path).links():
        if not target or EXTERNAL.match(target):
            continue
        resolved, anchor = resolve(path, target)
        if not resolved.exists():
            broken.append(f"{page_id(path)}:{number}: {target}: no such file")
        elif anchor and (resolved.suffix != ".md" or anchor not in anchors(resolved)):
            broken.append(f"{page_id(path)}:{number}: {target}: no heading #{anchor}")
    assert not broken, "\n".join(broken)


@pytest.mark.parametrize("path", pages(), ids=page_id)
def test_every_quoted_make_target_exists(path: Path) -> None:
    page = parse(path)
    unknown = []
    for number, code in [*page.code_spans(), *page.code]:
        if not re.search(r"(?<![\w./-])make(?![\w.-])", code):
            continue
        try:
            quoted = quoted_make_targets(code)
        except ValueError as exc:
            unknown.append(f"{page_id(path)}:{number}: cannot read {code!r} as shell: {exc}")
            continue
        unknown += [
            f"{page_id(path)}:{number}: make {target}: not a target of the Makefile"
            for target in quoted
            if target not in make_targets()
        ]
    assert not unknown, "\n".join(unknown)


def test_the_readme_is_at_most_250_lines() -> None:
    lines = len(README.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines; move detail into docs/"


def test_every_docs_page_is_reachable_from_the_readme() -> None:
    reached = {README.resolve()}
    queue = [README.resolve()]
    while queue:
        page = queue.pop()
        for _, target in parse(page).links():
            if not target or EXTERNAL.match(target):
                continue
            resolved, _ = resolve(page, target)
            if resolved.suffix == ".md" and resolved.exists() and resolved not in reached:
                reached.add(resolved)
                queue.append(resolved)
    unreached = [page_id(p) for p in pages() if p.resolve() not in reached]
    assert not unreached, f"pages no link from README.md leads to: {unreached}"


# The checks' own rules, on cases the pages above may not contain.


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("Local processes: `make run`", "local-processes-make-run"),
        ("`groupBy: machine`: an explicit cpuset", "groupby-machine-an-explicit-cpuset"),
        ("Claim ownership: what is checked", "claim-ownership-what-is-checked"),
        ("e2e: the chart on a one-node cluster", "e2e-the-chart-on-a-one-node-cluster"),
        ("Packaging: the chart, the wheel, the images", "packaging-the-chart-the-wheel-the-images"),
        ("Collecting a node's topology", "collecting-a-nodes-topology"),
        ("`cpuConfig.isolated`", "cpuconfigisolated"),
        ("Sockets → NUMA — cores", "sockets--numa--cores"),
        ("dra_cpu_* **metrics**", "dra_cpu_-metrics"),
    ],
)  # fmt: skip
def test_slugs_follow_github(heading: str, anchor: str) -> None:
    assert slug(heading_text(heading)) == anchor


@pytest.mark.parametrize(
    ("line", "targets"),
    [
        ("make run RUN_ARGS=\"--fixture xeon-2s-ht\"", ["run"]),
        ("make images                    # offline builds, make nothing else", ["images"]),
        ("cd dir && make venv protos", ["venv", "protos"]),
        ("DRACPU_TIERS=e2e make -C . -j 2 e2e", ["e2e"]),
        ("echo make", []),
        ("tools/build-images.sh build", []),
    ],
)  # fmt: skip
def test_make_invocations_are_read_as_the_shell_would(line: str, targets: list[str]) -> None:
    assert quoted_make_targets(line) == targets
