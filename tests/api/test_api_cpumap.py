"""The CPU map: grouping, roles and colours (pure), and the SVG drawn from it."""

from __future__ import annotations

import re
import shutil
import tempfile
import xml.etree.ElementTree as ET
from functools import cache
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dracpu.api import page
from dracpu.api.cpumap import ClaimCPUs, CPUMap, Pool, build
from dracpu.core.cpuset import CPUSet
from dracpu.core.machine import Machine
from dracpu.topology.discovery import discover
from dracpu.topology.fixtures import write_fixture

SVG = "{http://www.w3.org/2000/svg}"


@cache
def machine(fixture: str) -> Machine:
    root = Path(tempfile.mkdtemp(prefix="api-map-", dir="/tmp"))
    try:
        return discover(write_fixture(fixture, root / "sys"))
    finally:
        shutil.rmtree(root, ignore_errors=True)


POOL = Pool(
    shared=CPUSet.parse("1,4-19,21,24-29,31-39"),
    reserved=CPUSet.parse("0,20"),
    exclusive=CPUSet.parse("2-3,22-23,30"),
)
CLAIMS = [
    ClaimCPUs("uid-db", "team-a", "db", CPUSet.parse("2-3,22-23")),
    ClaimCPUs("uid-late", "team-b", "late", CPUSet.parse("30")),
]


def roles(cpu_map: CPUMap) -> dict[int, tuple[str, str | None]]:
    return {t.cpu.cpu_id: (t.role, t.claim.uid if t.claim else None) for t in cpu_map.threads()}


@pytest.mark.parametrize(
    ("pool", "claims", "cpu", "expected"),
    [
        pytest.param(POOL, CLAIMS, 0, ("reserved", None), id="reserved"),
        pytest.param(POOL, CLAIMS, 1, ("shared", None), id="shared"),
        pytest.param(POOL, CLAIMS, 22, ("claim", "uid-db"), id="claim"),
        pytest.param(POOL, CLAIMS[:1], 30, ("exclusive", None), id="exclusive-without-claim"),
        pytest.param(None, CLAIMS, 1, ("unknown", None), id="no-allocator-state"),
        pytest.param(Pool(CPUSet(), CPUSet(), CPUSet()), [], 5, ("unknown", None), id="in-no-set"),
    ],
)
def test_thread_roles(
    pool: Pool | None, claims: list[ClaimCPUs], cpu: int, expected: tuple[str, str | None]
) -> None:
    assert roles(build(machine("xeon-2s-ht"), pool, claims))[cpu] == expected


@pytest.mark.parametrize(
    ("fixture", "shape"),
    [
        # sockets, NUMA nodes per socket, L3 groups per NUMA node, cores per L3, threads per core
        pytest.param("xeon-2s-ht", (2, 1, 1, 10, 2), id="xeon-2s-ht"),
        pytest.param("epyc-2s-nps4", (2, 4, 2, 8, 2), id="epyc-256-cpus"),
        pytest.param("snc", (2, 2, 1, 8, 2), id="sub-numa-shares-l3"),
        pytest.param("smt4", (1, 1, 1, 8, 4), id="smt4"),
    ],
)
def test_hierarchy(fixture: str, shape: tuple[int, int, int, int, int]) -> None:
    sockets, nodes, caches, cores, threads = shape
    cpu_map = build(machine(fixture), None, [])
    assert len(cpu_map.sockets) == sockets
    for socket in cpu_map.sockets:
        assert len(socket.numa_nodes) == nodes
        for node in socket.numa_nodes:
            assert len(node.caches) == caches
            for group in node.caches:
                assert len(group.cores) == cores
                assert all(len(core.threads) == threads for core in group.cores)


def test_claim_colours_are_distinct_and_follow_cpu_order() -> None:
    claims = [ClaimCPUs(f"uid-{i}", "ns", f"c{i}", CPUSet([39 - i])) for i in range(30)]
    cpu_map = build(machine("xeon-2s-ht"), None, claims)
    assert [c.uid for c in cpu_map.claims] == [f"uid-{i}" for i in reversed(range(30))]
    colours = [c.colour for c in cpu_map.claims]
    assert len(set(colours)) == len(colours)


@st.composite
def claim_sets(draw: st.DrawFn) -> list[ClaimCPUs]:
    cpus = draw(st.permutations(range(40)))
    cuts = sorted(draw(st.lists(st.integers(0, 40), max_size=6)))
    claims, start = [], 0
    for index, cut in enumerate(cuts):
        if cut > start:
            claims.append(ClaimCPUs(f"uid-{index}", "ns", f"c{index}", CPUSet(cpus[start:cut])))
            start = cut
    return claims


@settings(max_examples=50, deadline=None)
@given(claim_sets())
def test_every_cpu_drawn_once_with_its_owner(claims: list[ClaimCPUs]) -> None:
    node = machine("xeon-2s-ht")
    exclusive = CPUSet(cpu for claim in claims for cpu in claim.cpus)
    pool = Pool(node.cpu_set - exclusive, CPUSet(), exclusive)
    cpu_map = build(node, pool, claims)
    found = roles(cpu_map)
    assert sorted(found) == list(range(40))
    assert sum(cpu_map.counts.values()) == 40
    owner = {cpu: c.uid for c in claims for cpu in c.cpus}
    assert {cpu: uid for cpu, (_, uid) in found.items() if uid} == owner
    drawn = re.findall(r'data-cpu="(\d+)"', page.svg(cpu_map))
    assert sorted(int(cpu) for cpu in drawn) == list(range(40))


# ---- the drawing -----------------------------------------------------------------------------


def _boxes(svg_text: str) -> list[tuple[str, float, float, float, float, str]]:
    """(class, x, y, w, h, title) of every rect, in absolute coordinates."""
    out: list[tuple[str, float, float, float, float, str]] = []

    def walk(element: ET.Element, dx: float, dy: float, cls: str, title: str) -> None:
        move = re.match(r"translate\(([-\d.]+),([-\d.]+)\)", element.get("transform", ""))
        if move:
            dx, dy = dx + float(move.group(1)), dy + float(move.group(2))
        cls = element.get("class", cls) if element.tag == SVG + "g" else cls
        own_title = element.find(SVG + "title")
        if own_title is not None and element.tag == SVG + "g":
            title = own_title.text or ""
        for child in element:
            if child.tag == SVG + "rect":
                out.append(
                    (
                        cls,
                        dx + float(child.get("x", 0)),
                        dy + float(child.get("y", 0)),
                        float(child.get("width", 0)),
                        float(child.get("height", 0)),
                        title,
                    )
                )
            walk(child, dx, dy, cls, title)

    walk(ET.fromstring(svg_text), 0, 0, "", "")
    return out


@pytest.mark.parametrize("fixture", ["xeon-2s-ht", "epyc-2s-nps4", "intel-hybrid", "small-vm"])
def test_threads_do_not_overlap_and_stay_inside_their_core(fixture: str) -> None:
    cpu_map = build(machine(fixture), None, [])
    boxes = _boxes(page.svg(cpu_map))
    threads = [b for b in boxes if b[0] == "thread"]
    cores = [b for b in boxes if b[0] == "core"]
    assert len(threads) == cpu_map.cpu_count
    for i, (_, x, y, w, h, title) in enumerate(threads):
        assert title.startswith("CPU ")
        assert w >= 30 and h >= 20  # room for a four-digit number at 11px
        for _, x2, y2, w2, h2, _ in threads[i + 1 :]:
            assert x + w <= x2 or x2 + w2 <= x or y + h <= y2 or y2 + h2 <= y
        assert any(
            cx <= x and x + w <= cx + cw and cy <= y and y + h <= cy + ch
            for _, cx, cy, cw, ch, _ in cores
        )


def test_256_cpus_fit_a_wide_screen() -> None:
    cpu_map = build(machine("epyc-2s-nps4"), None, [])
    assert cpu_map.cpu_count == 256
    svg_text = page.svg(cpu_map)
    width = float(re.search(r'<svg[^>]* width="(\d+)"', svg_text).group(1))  # type: ignore[union-attr]
    height = float(re.search(r'<svg[^>]* height="(\d+)"', svg_text).group(1))  # type: ignore[union-attr]
    assert width <= page.ROW_WIDTH + 2
    assert height <= 2400


def test_page_escapes_names_and_lists_every_claim_in_the_legend() -> None:
    claims = [
        ClaimCPUs("uid-x", "ns", "<script>alert(1)</script>", CPUSet([5])),
        ClaimCPUs("uid-y", "ns", "plain", CPUSet([6, 26])),
    ]
    html = page.cpu_map_page("node & co", build(machine("xeon-2s-ht"), POOL, claims), ["note <b>"])
    assert "<script>" not in html
    assert "&lt;script&gt;" in html
    assert "node &amp; co" in html
    assert "note &lt;b&gt;" in html
    assert html.count('<li data-claim="') == 2
    assert 'data-claim="uid-y"' in html
    assert "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")


def test_a_placed_claims_memory_nodes_are_shown_in_the_legend_and_on_its_cpus() -> None:
    claims = [
        ClaimCPUs("uid-p", "ns", "placed", CPUSet([12, 32]), CPUSet([1])),
        ClaimCPUs("uid-s", "ns", "spread", CPUSet([5, 15]), CPUSet([0, 1])),
        ClaimCPUs("uid-u", "ns", "unplaced", CPUSet([6])),
    ]
    cpu_map = build(machine("xeon-2s-ht"), POOL, claims)
    html = page.cpu_map_page("node", cpu_map, [])
    assert "(2: 12,32, memory on NUMA node 1)" in html
    assert "(2: 5,15, memory on NUMA nodes 0-1)" in html
    assert "(1: 6)</li>" in html  # not placed: nothing said in the legend
    titles = {
        t.cpu.cpu_id: t.title
        for s in cpu_map.sockets
        for n in s.numa_nodes
        for c in n.caches
        for core in c.cores
        for t in core.threads
    }
    assert titles[12].endswith("claim ns/placed (uid uid-p), memory on NUMA node 1")
    assert titles[6].endswith("claim ns/unplaced (uid uid-u)")  # every node: nothing said


# ---- counts in the page's text ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("count", "noun", "expected"),
    [
        pytest.param(0, "claim", "0 claims", id="none"),
        pytest.param(1, "socket", "1 socket", id="one"),
        pytest.param(2, "NUMA node", "2 NUMA nodes", id="two"),
        pytest.param(1, "CPU", "1 CPU", id="one-cpu"),
        pytest.param(40, "CPU", "40 CPUs", id="many-cpus"),
    ],
)
def test_counted_is_singular_only_for_one(count: int, noun: str, expected: str) -> None:
    assert page.counted(count, noun) == expected


def _texts(html: str) -> list[str]:
    """The summary paragraph and every title of the page."""
    summary = re.search(r'<p id="summary">([^<]*)', html)
    assert summary is not None
    return [summary.group(1), *re.findall(r"<title>([^<]*)</title>", html)]


def test_a_one_cpu_node_is_counted_in_the_singular() -> None:
    vm = machine("small-vm")
    one = Machine.build([c for c in vm.cpus if c.cpu_id == 0])
    texts = _texts(page.cpu_map_page("node", build(one, None, []), []))
    assert texts[0].startswith("1 CPU in 1 socket; 0 CPUs held by 0 claims. ")
    for title in (
        "CPU map: 1 CPU",
        "socket 0: 1 CPU",
        "NUMA node 0: 1 CPU",
        "no L3 reported: 1 core, 1 CPU",
    ):
        assert title in texts
    claim = [ClaimCPUs("uid-c", "ns", "c", CPUSet([0]))]
    one_claim = build(one, Pool(CPUSet(), CPUSet(), CPUSet([0])), claim)
    summary = _texts(page.cpu_map_page("node", one_claim, []))[0]
    assert summary.startswith("1 CPU in 1 socket; 1 CPU held by 1 claim. ")


def test_a_bigger_node_is_counted_in_the_plural() -> None:
    texts = _texts(page.cpu_map_page("node", build(machine("xeon-2s-ht"), POOL, CLAIMS), []))
    assert texts[0].startswith("40 CPUs in 2 sockets; 5 CPUs held by 2 claims. ")
    for title in (
        "CPU map: 40 CPUs",
        "socket 0: 20 CPUs",
        "NUMA node 1: 20 CPUs",
        "L3 0: 10 cores, 20 CPUs",
    ):
        assert title in texts
    assert not [t for t in texts if re.search(r"\b1 \w+s\b", t)]


@pytest.mark.parametrize(
    ("shown", "line"),
    [
        pytest.param(1, "… and 1 more claim (see /v1/claims)", id="one-hidden"),
        pytest.param(0, "… and 2 more claims (see /v1/claims)", id="two-hidden"),
    ],
)
def test_claims_left_out_of_the_legend_are_counted(
    monkeypatch: pytest.MonkeyPatch, shown: int, line: str
) -> None:
    monkeypatch.setattr(page, "LEGEND_CLAIMS", shown)
    html = page.cpu_map_page("node", build(machine("xeon-2s-ht"), POOL, CLAIMS), [])
    assert f"<li>{line}</li>" in html
