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
from dracpu.api.cpumap import ClaimCPUs, CPUMap, MemoryDevice, MemoryHeld, Pool, build
from dracpu.api.routers.pages import memory_devices
from dracpu.core.cpuset import CPUSet
from dracpu.core.errors import ProtocolError
from dracpu.core.machine import Machine
from dracpu.pb.allocator.v1 import allocator_pb2 as pb
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


def test_a_claim_including_the_shared_pool_is_shown_as_claimed_and_shared() -> None:
    claims = [
        ClaimCPUs("uid-m", "ns", "pmd", CPUSet([12, 32]), CPUSet([1]), shares_pool=True),
        ClaimCPUs("uid-e", "ns", "db", CPUSet([6])),
    ]
    cpu_map = build(machine("xeon-2s-ht"), POOL, claims)
    html = page.cpu_map_page("node", cpu_map, [])
    assert "(2: 12,32, claimed + shared, memory on NUMA node 1)</li>" in html
    assert "(1: 6)</li>" in html  # its container runs on its CPUs only: nothing said
    titles = {t.cpu.cpu_id: t.title for t in cpu_map.threads()}
    assert titles[32].endswith("claim ns/pmd (uid uid-m, claimed + shared), memory on NUMA node 1")
    assert titles[6].endswith("claim ns/db (uid uid-e)")
    # Its CPUs stay the claim's; the shared pool's stay the pool's.
    assert {t.role for t in cpu_map.threads() if t.cpu.cpu_id in (12, 32)} == {"claim"}


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


# ---- memory ----------------------------------------------------------------------------------

GIB, MIB = 1 << 30, 1 << 20
# xeon-2s-ht with memory devices: node 0 publishes 13Gi of memory and a 1Gi pool of 2 MiB
# pages, node 1 7680Mi and a 512Mi pool.
MEMORY_DEVICES = [
    MemoryDevice(0, {"memory": 13 * GIB, "hugepages-2Mi": GIB, "hugepages-1Gi": 2 * GIB}),
    MemoryDevice(1, {"memory": 7680 * MIB, "hugepages-2Mi": 512 * MIB}),
]
MEMORY_CLAIMS = [
    ClaimCPUs("uid-dpdk", "net", "dpdk", CPUSet.parse("12-13,32-33"), CPUSet([1]),
              (MemoryHeld(1, "hugepages-2Mi", 512 * MIB), MemoryHeld(1, "memory", GIB))),
    ClaimCPUs("uid-vm", "vms", "vm", CPUSet.parse("14,34"), CPUSet([1]),
              (MemoryHeld(1, "memory", 2 * GIB),)),
    ClaimCPUs("uid-plain", "ns", "plain", CPUSet([5])),
]  # fmt: skip


def memory_of(cpu_map: CPUMap) -> dict[tuple[int, str], tuple[int | None, int, int | None]]:
    return {(r.node, r.kind): (r.published, r.claimed, r.free) for r in cpu_map.memory}


def test_each_nodes_memory_is_published_claimed_and_free_per_kind() -> None:
    cpu_map = build(machine("xeon-2s-ht"), POOL, MEMORY_CLAIMS, MEMORY_DEVICES)
    assert memory_of(cpu_map) == {
        (0, "memory"): (13 * GIB, 0, 13 * GIB),
        (0, "hugepages-2Mi"): (GIB, 0, GIB),
        (0, "hugepages-1Gi"): (2 * GIB, 0, 2 * GIB),
        (1, "memory"): (7680 * MIB, 3 * GIB, 4608 * MIB),
        (1, "hugepages-2Mi"): (512 * MIB, 512 * MIB, 0),
    }
    # Memory first, then the page sizes from the smallest up, node by node.
    assert [(r.node, r.kind) for r in cpu_map.memory][:3] == [
        (0, "memory"), (0, "hugepages-2Mi"), (0, "hugepages-1Gi")
    ]  # fmt: skip
    (row,) = [r for r in cpu_map.memory if (r.node, r.kind) == (1, "memory")]
    assert [(claim.uid, amount) for claim, amount in row.holders] == [
        ("uid-dpdk", GIB), ("uid-vm", 2 * GIB)
    ]  # fmt: skip
    node1 = cpu_map.sockets[1].numa_nodes[0]
    assert [r.kind for r in node1.memory] == ["memory", "hugepages-2Mi"]


def test_the_page_shows_who_holds_each_nodes_memory_and_what_is_free() -> None:
    cpu_map = build(machine("xeon-2s-ht"), POOL, MEMORY_CLAIMS, MEMORY_DEVICES)
    html = page.cpu_map_page("node", cpu_map, [])
    table = ET.fromstring(html[html.index('<table id="memory"') : html.index("</table>") + 8])
    rows = {
        (tr.get("data-numa"), tr.get("data-kind")): ["".join(td.itertext()) for td in tr]
        for tr in table.iter("tr")
        if tr.get("data-numa") is not None
    }
    assert rows[("1", "memory")] == ["1", "memory", "7680Mi", "3Gi", "4608Mi",
                                     "net/dpdk 1Gi, vms/vm 2Gi"]  # fmt: skip
    assert rows[("1", "hugepages-2Mi")] == ["1", "hugepages-2Mi", "512Mi", "512Mi", "0",
                                            "net/dpdk 512Mi"]  # fmt: skip
    assert rows[("0", "hugepages-1Gi")] == ["0", "hugepages-1Gi", "2Gi", "0", "2Gi", "—"]
    assert 'data-kind="hugepages-2Mi" class="full"' in html  # nothing left: marked
    # The legend and the CPUs' titles say what the claim holds; the node's box sums it up.
    assert "(4: 12-13,32-33, memory on NUMA node 1: memory 1Gi; hugepages-2Mi 512Mi)" in html
    assert (
        "<title>NUMA node 1: 20 CPUs; memory 3Gi of 7680Mi claimed, 4608Mi free; "
        "hugepages-2Mi 512Mi of 512Mi claimed, 0 free</title>"
    ) in html
    assert "(1: 5)</li>" in html  # a claim without memory says nothing of it


def test_without_memory_devices_the_page_has_no_memory_section() -> None:
    cpu_map = build(machine("xeon-2s-ht"), POOL, CLAIMS, [])
    assert cpu_map.memory == ()
    html = page.cpu_map_page("node", cpu_map, [])
    assert 'id="memory"' not in html
    assert "<title>NUMA node 0: 20 CPUs</title>" in html


def test_memory_a_claim_holds_of_a_device_no_longer_published_is_shown_as_such() -> None:
    """The devices unknown (None) or without the kind: the claim's hold is still listed."""
    for devices in (None, MEMORY_DEVICES[:1]):
        cpu_map = build(machine("xeon-2s-ht"), POOL, MEMORY_CLAIMS, devices)
        assert memory_of(cpu_map)[(1, "memory")] == (None, 3 * GIB, None)
        html = page.cpu_map_page("node", cpu_map, [])
        assert "memory 3Gi claimed, none published" in html


def test_a_claim_holding_memory_on_two_nodes_names_the_node_of_each_amount() -> None:
    held = (MemoryHeld(0, "hugepages-1Gi", GIB), MemoryHeld(1, "memory", GIB))
    claims = [ClaimCPUs("uid-two", "ns", "two", CPUSet([4, 14]), CPUSet([0, 1]), held)]
    (entry,) = build(machine("xeon-2s-ht"), POOL, claims, MEMORY_DEVICES).claims
    assert entry.memory == (
        ", memory on NUMA nodes 0-1: hugepages-1Gi 1Gi of node 0; memory 1Gi of node 1"
    )


def device_list(*devices: pb.Device) -> pb.DeviceList:
    return pb.DeviceList(devices=list(devices))


def memory_device(name: str, node: int, capacity: dict[str, str]) -> pb.Device:
    attributes = {"resource.kubernetes.io/numaNode": pb.AttributeValue(int=node)}
    return pb.Device(name=name, attributes=attributes, capacity=capacity)


def test_the_allocators_memory_devices_are_read_in_bytes_per_kind() -> None:
    reply = device_list(
        pb.Device(name="cpudevnuma000", capacity={"dra.cpu/cpu": "18"}),
        memory_device("memory-node-1", 1, {"dra.cpu/memory": "7680Mi",
                                           "dra.cpu/hugepages2Mi": "0"}),
    )  # fmt: skip
    (device,) = memory_devices(reply)
    assert device == MemoryDevice(1, {"memory": 7680 * MIB, "hugepages-2Mi": 0})


@pytest.mark.parametrize(
    ("device", "message"),
    [
        pytest.param(
            memory_device("memory-node-0", 0, {"dra.cpu/memory": "1.5Gi"}),
            "allocator: memory device memory-node-0 capacity dra.cpu/memory: '1.5Gi' is not a "
            "byte count such as 64Mi or 1Gi",
            id="bad-capacity",
        ),
        pytest.param(
            pb.Device(name="memory-node-0", capacity={"dra.cpu/memory": "1Gi"}),
            "allocator: memory device memory-node-0 has no NUMA node",
            id="no-node",
        ),
    ],
)
def test_a_malformed_memory_device_is_a_protocol_error(device: pb.Device, message: str) -> None:
    with pytest.raises(ProtocolError) as caught:
        memory_devices(device_list(device))
    assert str(caught.value) == message
