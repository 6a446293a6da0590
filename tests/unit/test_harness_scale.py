"""The scheduler scale benchmark's pure parts (harness.scale): each simulated node's slices,
the claim templates and pods, the baselines and the ratios to them, the throttling read from
the components' logs and metrics, the percentile and the picture."""

from __future__ import annotations

import functools
import math
import xml.etree.ElementTree as ET
from dataclasses import replace
from typing import Any

import pytest
from harness.scale import (
    CLAIM_SIZES,
    DRA_TIMEOUT_LOG,
    LAYOUTS,
    MODES,
    NAMESPACE,
    THROTTLE_LOG,
    Layout,
    Result,
    claim_template,
    device_class,
    discover_machine,
    draw_svg,
    json_bytes,
    layout_chunks,
    log_lines,
    mode_chunks,
    nice_ceiling,
    node_slices,
    percentile,
    pod,
    rate_limiter_waits,
    table,
    template_name,
    with_ratios,
)
from harness.slice_rules import slice_refusals

from dracpu.core.driver import CPU_CAPACITY, DRIVER_NAME
from dracpu.core.machine import Machine

SVG = "{http://www.w3.org/2000/svg}"


@functools.cache
def machine() -> Machine:
    return discover_machine()


@functools.cache
def chunks(layout: Layout) -> list[list[dict[str, Any]]]:
    return layout_chunks(machine(), layout)


def test_the_machine_is_two_sockets_of_64_smt_cores_in_four_numa_nodes() -> None:
    m = machine()
    assert len(m.cpus) == 256
    assert {c.socket_id for c in m.cpus} == {0, 1}
    assert {c.numa_node_id for c in m.cpus} == {0, 1, 2, 3}
    assert all(len(c.siblings) == 2 for c in m.cpus)


@pytest.mark.parametrize(
    ("layout", "sizes", "first"),
    [
        # minSharedCPUs: 1 keeps the shared pool's first CPU out of every layout.
        ("individual", [128, 127], "cpudev001"),
        ("numanode", [4], "cpudevnuma000"),
        ("socket", [2], "cpudevsocket000"),
    ],
)
def test_each_layout_publishes_the_plugins_chunks(
    layout: Layout, sizes: list[int], first: str
) -> None:
    got = chunks(layout)
    assert [len(c) for c in got] == sizes
    assert got[0][0]["name"] == first
    if layout != "individual":
        cpus = sum(int(d["capacity"][CPU_CAPACITY]["value"]) for d in got[0])
        assert cpus == 255


@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_node_gets_the_same_devices_under_its_own_name(layout: Layout) -> None:
    one = node_slices(chunks(layout), "kwok-node-0001", "uid-1")
    two = node_slices(chunks(layout), "kwok-node-0002", "uid-2")
    assert len(one) == len(chunks(layout))
    for index, (a, b) in enumerate(zip(one, two, strict=True)):
        assert a["spec"]["devices"] == b["spec"]["devices"] == chunks(layout)[index]
        assert a["spec"]["driver"] == DRIVER_NAME
        assert a["spec"]["nodeName"] == a["spec"]["pool"]["name"] == "kwok-node-0001"
        assert b["spec"]["nodeName"] == b["spec"]["pool"]["name"] == "kwok-node-0002"
        assert a["spec"]["pool"]["resourceSliceCount"] == len(one)
        assert a["metadata"]["generateName"] == f"{index:05x}-{DRIVER_NAME}-kwok-node-0001-"
        assert a["metadata"]["ownerReferences"] == [
            {"apiVersion": "v1", "kind": "Node", "name": "kwok-node-0001", "uid": "uid-1",
             "controller": True}
        ]  # fmt: skip
        assert slice_refusals(a) == []
    # Only the names differ: same length names, same bytes.
    assert json_bytes(one) == json_bytes(two)


def test_individual_slices_are_fifty_times_the_grouped_ones() -> None:
    sizes = {layout: json_bytes(node_slices(chunks(layout), "n", "u")) for layout in LAYOUTS}
    assert sizes["individual"] > 50 * sizes["numanode"] > 50 * sizes["socket"]


def test_pods_cycle_through_the_claim_sizes() -> None:
    pods = [pod(i) for i in range(8)]
    templates = [p["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] for p in pods]
    assert templates == [template_name(k) for k in CLAIM_SIZES * 2]
    assert len({p["metadata"]["name"] for p in pods}) == 8
    for p in pods:
        assert p["metadata"]["namespace"] == NAMESPACE
        assert p["spec"]["containers"][0]["resources"]["claims"] == [{"name": "cpus"}]


def test_individual_templates_count_devices() -> None:
    template = claim_template("individual", 16)
    assert template["metadata"]["name"] == "cpus-16"
    request = template["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    assert request == {"deviceClassName": "dra.cpu", "allocationMode": "ExactCount", "count": 16}


@pytest.mark.parametrize("layout", ["numanode", "socket"])
def test_grouped_templates_request_capacity(layout: Layout) -> None:
    request = claim_template(layout, 32)["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    assert request == {"deviceClassName": "dra.cpu", "capacity": {"requests": {CPU_CAPACITY: "32"}}}


def test_no_individual_claim_asks_for_more_than_an_allocation_holds() -> None:
    # resource.k8s.io/v1 AllocationResultsMaxSize: 32 results per claim.
    assert max(CLAIM_SIZES) <= 32


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        (list(range(1, 101)), 50, 50),
        (list(range(1, 101)), 99, 99),
        (list(range(1, 101)), 100, 100),
        (list(range(100, 0, -1)), 99, 99),
        ([7.0], 99, 7.0),
        ([1, 2, 3, 4], 50, 2),
        ([1, 2, 3, 4], 0, 1),
        ([5, 1, 10], 99, 10),
    ],
)
def test_percentile_is_the_nearest_rank(values: list[float], q: float, expected: float) -> None:
    assert percentile(values, q) == expected


def test_percentile_of_nothing_is_nan() -> None:
    assert math.isnan(percentile([], 99))


@pytest.mark.parametrize(
    ("value", "ceiling"),
    [(0, 1), (0.7, 1), (1, 1), (1.2, 2), (2.2, 2.5), (3, 5), (7, 10), (42, 50), (230, 250)],
)
def test_axis_tops_are_round(value: float, ceiling: float) -> None:
    assert nice_ceiling(value) == ceiling


def test_nodra_pods_ask_their_size_as_plain_cpu_and_hold_no_claim() -> None:
    for index, size in enumerate(CLAIM_SIZES):
        spec = pod(index, "nodra")["spec"]
        assert "resourceClaims" not in spec
        resources = spec["containers"][0]["resources"]
        assert resources == {"requests": {"cpu": str(size)}, "limits": {"cpu": str(size)}}


def test_nodra_publishes_no_slices() -> None:
    assert mode_chunks(machine(), "nodra") == []


def test_onedevice_is_one_slice_of_one_shared_device() -> None:
    got = mode_chunks(machine(), "onedevice")
    assert got == [[{"name": "node", "allowMultipleAllocations": True}]]
    (one,) = node_slices(got, "kwok-node-0001", "uid-1")
    assert one["spec"]["devices"] == got[0]
    assert one["spec"]["pool"]["resourceSliceCount"] == 1
    assert slice_refusals(one) == []


def test_onedevice_claims_ask_for_the_one_device_whatever_their_size() -> None:
    for size in CLAIM_SIZES:
        template = claim_template("onedevice", size)
        assert template["metadata"]["name"] == template_name(size)
        request = template["spec"]["spec"]["devices"]["requests"][0]["exactly"]
        assert request == {"deviceClassName": "dra.cpu", "allocationMode": "ExactCount", "count": 1}


def test_the_onedevice_class_matches_the_driver_without_looking_into_capacity() -> None:
    expression = device_class("onedevice")["spec"]["selectors"][0]["cel"]["expression"]
    assert expression == f'device.driver == "{DRIVER_NAME}"'
    assert "capacity" in device_class("numanode")["spec"]["selectors"][0]["cel"]["expression"]


def test_the_modes_are_the_baselines_then_the_layouts() -> None:
    assert ("nodra", "onedevice", *LAYOUTS) == MODES
    for mode in MODES:
        assert pod(0, mode)["metadata"]["name"] == "pod-00000"


def result(mode: str, nodes: int, rate: float, p99: float, **more: Any) -> Result:
    return Result(
        mode=mode, nodes=nodes, pods=100, bound=100, seconds=1.0, pods_per_s=rate,
        p50_ms=p99 / 2, p99_ms=p99, apiserver_cpu_s=1.0, scheduler_cpu_s=1.0,
        apiserver_rss_mib=300.0, scheduler_rss_mib=80.0, slices_per_node=1,
        devices_per_node=4, slice_bytes_per_node=1900, **more,
    )  # fmt: skip


def test_the_scale_line_has_the_fixed_form() -> None:
    line = result(
        "numanode", 500, 12.345, 1234.6, throttle_log_lines=0, throttle_waits=0,
        vs_nodra=0.5, vs_onedevice=0.8123,
    ).line()  # fmt: skip
    assert line == (
        "scale: mode=numanode nodes=500 pods=100 pods_per_s=12.3 p99_ms=1235 "
        "vs_nodra=0.50 vs_onedevice=0.81 throttled=no"
    )


@pytest.mark.parametrize(
    ("log_lines_seen", "waits", "throttled"),
    [(0, 0, "no"), (1, 0, "yes"), (0, 3, "yes"), (-1, 0, "yes"), (0, -1, "yes")],
    ids=["neither", "a-log-line", "a-long-wait", "logs-unread", "metrics-unread"],
)
def test_throttled_is_no_only_when_logs_and_metrics_were_read_and_show_none(
    log_lines_seen: int, waits: int, throttled: str
) -> None:
    got = result("socket", 100, 1.0, 1.0, throttle_log_lines=log_lines_seen, throttle_waits=waits)
    assert got.throttled == throttled


def test_ratios_are_to_the_baselines_of_the_same_node_count() -> None:
    runs = [
        result("nodra", 100, 40.0, 1.0),
        result("onedevice", 100, 20.0, 1.0),
        result("numanode", 100, 16.0, 1.0),
        result("nodra", 250, 10.0, 1.0),
        result("numanode", 250, 5.0, 1.0),
    ]
    got = {(r.mode, r.nodes): r for r in with_ratios(runs)}
    assert got["numanode", 100].vs_nodra == pytest.approx(0.4)
    assert got["numanode", 100].vs_onedevice == pytest.approx(0.8)
    assert got["onedevice", 100].vs_onedevice == pytest.approx(1.0)
    assert got["numanode", 250].vs_nodra == pytest.approx(0.5)
    assert math.isnan(got["numanode", 250].vs_onedevice)  # no onedevice run at 250 nodes


def test_a_baseline_that_bound_nothing_gives_no_ratio() -> None:
    got = with_ratios([result("nodra", 100, 0.0, 1.0), result("socket", 100, 3.0, 1.0)])
    assert math.isnan(got[1].vs_nodra)


def test_the_busiest_process_is_the_one_that_spent_most_cpu() -> None:
    got = result(
        "socket", 100, 1.0, 1.0, controller_manager_cpu_s=0.4, etcd_cpu_s=0.2, kwok_cpu_s=0.3
    )
    got = replace(got, seconds=2.0, scheduler_cpu_s=1.8)
    name, cores = got.busiest()
    assert name == "kube-scheduler"
    assert cores == pytest.approx(0.9)


SCHEDULER_METRICS = """\
# HELP rest_client_rate_limiter_duration_seconds [ALPHA] Client side rate limiter latency
# TYPE rest_client_rate_limiter_duration_seconds histogram
rest_client_rate_limiter_duration_seconds_bucket{host="127.0.0.1:27443",verb="GET",le="0.005"} 90
rest_client_rate_limiter_duration_seconds_bucket{host="127.0.0.1:27443",verb="GET",le="0.025"} 95
rest_client_rate_limiter_duration_seconds_bucket{host="127.0.0.1:27443",verb="GET",le="0.1"} 97
rest_client_rate_limiter_duration_seconds_bucket{host="127.0.0.1:27443",verb="GET",le="1"} 99
rest_client_rate_limiter_duration_seconds_bucket{host="127.0.0.1:27443",verb="GET",le="+Inf"} 100
rest_client_rate_limiter_duration_seconds_sum{host="127.0.0.1:27443",verb="GET"} 3.2
rest_client_rate_limiter_duration_seconds_count{host="127.0.0.1:27443",verb="GET"} 100
rest_client_rate_limiter_duration_seconds_bucket{host="127.0.0.1:27443",verb="POST",le="0.005"} 40
rest_client_rate_limiter_duration_seconds_bucket{host="127.0.0.1:27443",verb="POST",le="0.025"} 40
rest_client_rate_limiter_duration_seconds_bucket{host="127.0.0.1:27443",verb="POST",le="0.1"} 40
rest_client_rate_limiter_duration_seconds_bucket{host="127.0.0.1:27443",verb="POST",le="1"} 40
rest_client_rate_limiter_duration_seconds_bucket{host="127.0.0.1:27443",verb="POST",le="+Inf"} 41
rest_client_request_duration_seconds_bucket{host="127.0.0.1:27443",verb="POST",le="0.005"} 1
rest_client_request_duration_seconds_bucket{host="127.0.0.1:27443",verb="POST",le="+Inf"} 41
"""


def test_rate_limiter_waits_are_the_requests_held_past_the_threshold() -> None:
    assert rate_limiter_waits(SCHEDULER_METRICS) == 1 + 1  # past 1 s, the default
    assert rate_limiter_waits(SCHEDULER_METRICS, over=0.1) == 3 + 1
    assert rate_limiter_waits(SCHEDULER_METRICS, over=0.005) == 10 + 1
    # A threshold between buckets counts from the largest bucket under it.
    assert rate_limiter_waits(SCHEDULER_METRICS, over=0.5) == 3 + 1
    assert rate_limiter_waits("") == 0


def test_log_lines_count_the_lines_holding_the_phrase() -> None:
    log = (
        'I1205 request.go:700] "Waited before sending request" delay="1.2s" '
        f'reason="{THROTTLE_LOG}, not priority and fairness"\n'
        "I1205 other line\n"
        f'E1205 schedule_one.go:1] "Error scheduling pod" err="{DRA_TIMEOUT_LOG}"\n'
    )
    assert log_lines(log, THROTTLE_LOG) == 1
    assert log_lines(log, DRA_TIMEOUT_LOG) == 1


def test_the_table_has_a_row_per_result() -> None:
    text = table([result("individual", 100, 1.0, 10.0), result("socket", 100, 2.0, 5.0)])
    lines = text.splitlines()
    assert len(lines) == 4
    assert lines[0].startswith("| mode | nodes |")
    assert lines[2].startswith("| individual | 100 |")


def test_the_picture_has_a_line_per_layout_in_each_panel() -> None:
    results = [
        result(mode, nodes, rate * nodes, p99)
        for mode, rate, p99 in (("individual", 0.01, 9000.0), ("numanode", 0.1, 800.0))
        for nodes in (100, 250, 500)
    ]
    root = ET.fromstring(draw_svg(results, "2 cores"))
    assert root.tag == f"{SVG}svg"
    lines = root.findall(f"{SVG}polyline")
    assert len(lines) == 4  # 2 layouts x 2 panels
    assert all(len(line.attrib["points"].split()) == 3 for line in lines)
    assert len(root.findall(f"{SVG}circle")) == 12
    texts = [t.text for t in root.findall(f"{SVG}text")]
    for expected in ("individual", "numanode", "100", "250", "500", "2 cores"):
        assert expected in texts
    # Every point lies inside the picture.
    width, height = float(root.attrib["width"]), float(root.attrib["height"])
    for circle in root.findall(f"{SVG}circle"):
        assert 0 <= float(circle.attrib["cx"]) <= width
        assert 0 <= float(circle.attrib["cy"]) <= height


def test_the_picture_of_one_node_count_has_points_and_no_lines() -> None:
    nan = float("nan")
    root = ET.fromstring(
        draw_svg([result("numanode", 500, 10.0, 900.0), result("socket", 500, nan, nan)])
    )
    assert root.findall(f"{SVG}polyline") == []
    assert len(root.findall(f"{SVG}circle")) == 2  # the NaN result has none
