"""HTML for people: the index at `/` and the CPU map at `/ui` (an inline SVG drawing).

Everything is rendered on the server into one self-contained document: inline CSS, no
scripts, no external assets, so it works from a node with no route to the internet.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from dracpu.api.cpumap import (
    ROLE_COLOURS,
    ROLE_LABELS,
    CacheGroup,
    Core,
    CPUMap,
    MemoryRow,
    NumaNode,
    Socket,
)
from dracpu.core.memory import binary_quantity

# Geometry in px. A thread is wide enough for a four-digit CPU number at 11px.
THREAD_W = 34
THREAD_H = 22
GAP = 3
PAD = 6
HEADER = 17
GRID_WIDTH = 640  # cores per row are chosen to keep an L3 group about this wide
ROW_WIDTH = 1400  # sockets wrap onto a new row beyond this
LEGEND_CLAIMS = 200

STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 16px; color: #1d1d1d; }
h1 { font-size: 20px; margin: 0 0 4px; }
.notice { background: #fff3cd; border: 1px solid #e0c36b; padding: 6px 10px; margin: 8px 0; }
#legend { list-style: none; padding: 0; display: flex; flex-wrap: wrap; gap: 4px 16px; }
#legend li { display: flex; align-items: center; gap: 6px; }
.swatch { display: inline-block; width: 14px; height: 14px; border: 1px solid #555; }
svg text { font-family: ui-monospace, monospace; }
svg .hdr { font: bold 12px system-ui, sans-serif; fill: #333; }
svg .cpu { font-size: 11px; fill: #111; text-anchor: middle; dominant-baseline: central; }
svg .box { fill: none; stroke: #888; }
svg .socket-box { stroke: #333; stroke-width: 1.5; fill: #fafafa; }
svg .numa-box { fill: #f2f2f7; }
svg .l3-box { fill: #ffffff; stroke-dasharray: 4 2; }
svg .core-box { fill: #ececec; stroke: #bbb; }
svg .thread rect { stroke: #555; }
svg .thread[data-role=unknown] rect { stroke-dasharray: 2 2; }
h2 { font-size: 16px; margin: 16px 0 4px; }
#memory { border-collapse: collapse; }
#memory th, #memory td { border: 1px solid #ccc; padding: 2px 8px; text-align: left; }
#memory td.bytes { text-align: right; font-family: ui-monospace, monospace; }
#memory tr.full td.free { color: #b00020; font-weight: bold; }
"""

LINKS = (
    ("/ui", "CPU map"),
    ("/v1/node", "node: topology summary, configuration, versions"),
    ("/v1/topology", "full CPU inventory"),
    ("/v1/devices", "published devices and their consumption"),
    ("/v1/claims", "prepared claims"),
    ("/v1/shared-pool", "shared and reserved CPUs"),
    ("/v1/containers", "containers as the runtime plugin sees them"),
    ("/v1/health", "health of every service, kubelet registration"),
    ("/readyz", "readiness"),
    ("/metrics", "Prometheus metrics"),
    ("/openapi.json", "OpenAPI document"),
)


def counted(count: int, noun: str) -> str:
    """`count` followed by its noun, singular for exactly one: "1 socket", "0 claims",
    "2 NUMA nodes". Every count the pages write goes through here."""
    return f"{count} {noun if count == 1 else noun + 's'}"


def _document(title: str, body: str) -> str:
    # The empty data: icon stops the browser asking for /favicon.ico.
    return (
        "<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8>"
        f"<title>{escape(title)}</title>"
        '<link rel="icon" href="data:,">'
        f"<style>{STYLE}</style></head><body>{body}</body></html>\n"
    )


def index(node_name: str) -> str:
    items = "".join(
        f'<li><a href="{href}">{escape(href)}</a> — {escape(text)}</li>' for href, text in LINKS
    )
    return _document(
        f"dra.cpu on {node_name}",
        f"<h1>dra.cpu on {escape(node_name)}</h1>"
        "<p>Read-only view of the CPU driver on this node.</p>"
        f'<p><a id="cpu-map-link" href="/ui">Open the CPU map</a></p><ul>{items}</ul>',
    )


def unavailable(node_name: str, reason: str) -> str:
    return _document(
        f"CPU map of {node_name}",
        f"<h1>CPU map of {escape(node_name)}</h1>"
        f'<p class="notice" id="unavailable">The CPU map needs the topology service: '
        f"{escape(reason)}</p>"
        '<p><a href="/">Back to the index</a></p>',
    )


# ---- layout ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Size:
    w: int
    h: int


def _core_size(core: Core) -> Size:
    n = len(core.threads)
    return Size(n * THREAD_W + (n + 1) * GAP, THREAD_H + 2 * GAP)


def _cache_layout(cache: CacheGroup) -> tuple[Size, int, Size]:
    """(box size, columns, grid cell size)."""
    cell = Size(max(_core_size(c).w for c in cache.cores), _core_size(cache.cores[0]).h)
    cols = max(1, min(len(cache.cores), (GRID_WIDTH + GAP) // (cell.w + GAP)))
    rows = -(-len(cache.cores) // cols)
    box = Size(
        2 * PAD + cols * cell.w + (cols - 1) * GAP,
        HEADER + rows * cell.h + (rows - 1) * GAP + PAD,
    )
    return box, cols, cell


def _stack(sizes: Sequence[Size]) -> Size:
    return Size(
        2 * PAD + max(s.w for s in sizes),
        HEADER + sum(s.h for s in sizes) + (len(sizes) - 1) * GAP + PAD,
    )


def _numa_size(node: NumaNode) -> Size:
    return _stack([_cache_layout(c)[0] for c in node.caches])


def _socket_size(socket: Socket) -> Size:
    return _stack([_numa_size(n) for n in socket.numa_nodes])


# ---- drawing ---------------------------------------------------------------------------------


def _core(core: Core, x: int, y: int, out: list[str]) -> None:
    size = _core_size(core)
    out.append(
        f'<g class="core" data-core="{core.index}" transform="translate({x},{y})">'
        f"<title>core {core.index} ({escape(core.core_type)})</title>"
        f'<rect class="core-box" width="{size.w}" height="{size.h}" rx="3"/>'
    )
    for i, thread in enumerate(core.threads):
        tx = GAP + i * (THREAD_W + GAP)
        claim = f' data-claim="{escape(thread.claim.uid)}"' if thread.claim else ""
        out.append(
            f'<g class="thread" data-cpu="{thread.cpu.cpu_id}" data-role="{thread.role}"{claim}>'
            f"<title>{escape(thread.title)}</title>"
            f'<rect x="{tx}" y="{GAP}" width="{THREAD_W}" height="{THREAD_H}" rx="2" '
            f'fill="{thread.colour}"/>'
            f'<text class="cpu" x="{tx + THREAD_W // 2}" y="{GAP + THREAD_H // 2}">'
            f"{thread.cpu.cpu_id}</text></g>"
        )
    out.append("</g>")


def _cache(cache: CacheGroup, x: int, y: int, out: list[str]) -> Size:
    box, cols, cell = _cache_layout(cache)
    cpus = sum(len(core.threads) for core in cache.cores)
    label = f"L3 {cache.l3_id}" if cache.l3_id >= 0 else "no L3 reported"
    out.append(
        f'<g class="l3" data-l3="{cache.l3_id}" transform="translate({x},{y})">'
        f"<title>{escape(label)}: {counted(len(cache.cores), 'core')}, {counted(cpus, 'CPU')}"
        "</title>"
        f'<rect class="box l3-box" width="{box.w}" height="{box.h}" rx="4"/>'
        f'<text class="hdr" x="{PAD}" y="{HEADER - 5}">{escape(label)}</text>'
    )
    for i, core in enumerate(cache.cores):
        row, col = divmod(i, cols)
        _core(core, PAD + col * (cell.w + GAP), HEADER + row * (cell.h + GAP), out)
    out.append("</g>")
    return box


def _numa(node: NumaNode, x: int, y: int, out: list[str]) -> None:
    size = _numa_size(node)
    cpus = sum(len(core.threads) for cache in node.caches for core in cache.cores)
    memory = "".join(f"; {row.summary}" for row in node.memory)
    out.append(
        f'<g class="numa" data-numa="{node.node_id}" transform="translate({x},{y})">'
        f"<title>NUMA node {node.node_id}: {counted(cpus, 'CPU')}{escape(memory)}</title>"
        f'<rect class="box numa-box" width="{size.w}" height="{size.h}" rx="5"/>'
        f'<text class="hdr" x="{PAD}" y="{HEADER - 5}">NUMA node {node.node_id}</text>'
    )
    cy = HEADER
    for cache in node.caches:
        cy += _cache(cache, PAD, cy, out).h + GAP
    out.append("</g>")


def _socket(socket: Socket, x: int, y: int, out: list[str]) -> None:
    size = _socket_size(socket)
    cpus = sum(
        len(core.threads) for n in socket.numa_nodes for cache in n.caches for core in cache.cores
    )
    out.append(
        f'<g class="socket" data-socket="{socket.socket_id}" transform="translate({x},{y})">'
        f"<title>socket {socket.socket_id}: {counted(cpus, 'CPU')}</title>"
        f'<rect class="box socket-box" width="{size.w}" height="{size.h}" rx="6"/>'
        f'<text class="hdr" x="{PAD}" y="{HEADER - 5}">Socket {socket.socket_id}</text>'
    )
    ny = HEADER
    for node in socket.numa_nodes:
        _numa(node, PAD, ny, out)
        ny += _numa_size(node).h + GAP
    out.append("</g>")


def svg(cpu_map: CPUMap) -> str:
    out: list[str] = []
    x = y = row_h = width = 0
    for socket in cpu_map.sockets:
        size = _socket_size(socket)
        if x and x + size.w > ROW_WIDTH:
            x, y, row_h = 0, y + row_h + 2 * GAP, 0
        _socket(socket, x, y, out)
        width = max(width, x + size.w)
        row_h = max(row_h, size.h)
        x += size.w + 4 * GAP
    height = y + row_h
    return (
        f'<svg id="cpu-map" xmlns="http://www.w3.org/2000/svg" role="img" '
        f'width="{width + 2}" height="{height + 2}" viewBox="-1 -1 {width + 2} {height + 2}">'
        f"<title>CPU map: {counted(cpu_map.cpu_count, 'CPU')}</title>{''.join(out)}</svg>"
    )


def _legend(cpu_map: CPUMap) -> str:
    items = []
    for role in ("reserved", "shared", "exclusive", "unknown"):
        count = cpu_map.counts.get(role, 0)
        if role in ("exclusive", "unknown") and not count:
            continue
        items.append(
            f'<li data-role="{role}"><span class="swatch" style="background:{ROLE_COLOURS[role]}">'
            f"</span>{escape(ROLE_LABELS[role])} ({count})</li>"
        )
    for claim in cpu_map.claims[:LEGEND_CLAIMS]:
        items.append(
            f'<li data-claim="{escape(claim.uid)}"><span class="swatch" '
            f'style="background:{claim.colour}"></span>'
            f'<span title="uid {escape(claim.uid)}">claim {escape(claim.label)}</span> '
            f"({len(claim.cpus)}: {escape(claim.cpus.format())}"
            + claim.runs_on
            + escape(claim.memory)
            + ")</li>"
        )
    hidden = len(cpu_map.claims) - LEGEND_CLAIMS
    if hidden > 0:
        items.append(f"<li>… and {counted(hidden, 'more claim')} (see /v1/claims)</li>")
    return f'<ul id="legend">{"".join(items)}</ul>'


def _bytes_cell(value: int | None, cls: str) -> str:
    text = "—" if value is None else binary_quantity(value)
    title = "" if value is None else f' title="{value} bytes"'
    return f'<td class="bytes {cls}"{title}>{text}</td>'


def _memory_row(row: MemoryRow) -> str:
    holders = ", ".join(
        f'<span data-claim="{escape(claim.uid)}" title="uid {escape(claim.uid)}">'
        f"{escape(claim.label)} {binary_quantity(amount)}</span>"
        for claim, amount in row.holders
    )
    full = ' class="full"' if row.free == 0 and row.published else ""
    return (
        f'<tr data-numa="{row.node}" data-kind="{escape(row.kind)}"{full}>'
        f"<td>{row.node}</td><td>{escape(row.kind)}</td>"
        f"{_bytes_cell(row.published, 'published')}{_bytes_cell(row.claimed, 'claimed')}"
        f"{_bytes_cell(row.free, 'free')}<td>{holders or '—'}</td></tr>"
    )


def memory_table(cpu_map: CPUMap) -> str:
    """Each NUMA node's memory devices, per kind: published, claimed, free (as the allocator
    counts it at prepare) and the claims holding it; "" when there is none to show."""
    if not cpu_map.memory:
        return ""
    rows = "".join(_memory_row(row) for row in cpu_map.memory)
    return (
        '<h2 id="memory-heading">Memory</h2>'
        "<p>What each NUMA node's memory device publishes, what prepared claims hold of it and "
        "what is left for new claims. Hugepages count whole pools, not the kernel's free "
        "pages.</p>"
        '<table id="memory"><thead><tr><th>NUMA node</th><th>kind</th><th>published</th>'
        "<th>claimed</th><th>free</th><th>held by</th></tr></thead>"
        f"<tbody>{rows}</tbody></table>"
    )


def cpu_map_page(node_name: str, cpu_map: CPUMap, notices: Sequence[str]) -> str:
    notes = "".join(f'<p class="notice">{escape(n)}</p>' for n in notices)
    claimed = cpu_map.counts.get("claim", 0)
    return _document(
        f"CPU map of {node_name}",
        f"<h1>CPU map of {escape(node_name)}</h1>"
        f'<p id="summary">{counted(cpu_map.cpu_count, "CPU")} in '
        f"{counted(len(cpu_map.sockets), 'socket')}; {counted(claimed, 'CPU')} held by "
        f"{counted(len(cpu_map.claims), 'claim')}. "
        "Hover a CPU for its place and owner. "
        '<a href="/">index</a></p>'
        f"{notes}{_legend(cpu_map)}{svg(cpu_map)}{memory_table(cpu_map)}",
    )
