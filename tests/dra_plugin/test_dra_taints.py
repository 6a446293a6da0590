"""Device taints for the CPUs the node cannot give: the taint computation as a table, then the
real topology service, allocator and dra-plugin on a sysfs fixture whose CPUs go offline and
come back, the slices read from the cluster folder the plugin writes.

xeon-2s-ht: cpudevnuma000 = CPUs 0-9,20-29, cpudevnuma001 = CPUs 10-19,30-39.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from harness.dra_plugin_node import Node
from harness.hotplug import Hotplug
from harness.waits import eventually

from dracpu.core import rpc
from dracpu.core.cpuset import CPUSet
from dracpu.dra_plugin.cluster.api_features import FeatureSupport
from dracpu.dra_plugin.publishing.slices import chunk_documents
from dracpu.dra_plugin.publishing.taints import (
    MAX_VALUE,
    OFFLINE,
    UNHEALTHY,
    cpus_value,
    health_taints,
    tainted,
    timestamp,
)
from dracpu.pb.allocator.v1 import allocator_pb2
from dracpu.pb.dra_plugin.v1 import dra_plugin_pb2, dra_plugin_pb2_grpc

pytestmark = pytest.mark.timeout(120)

# IsValidLabelValue (k8s.io/apimachinery/pkg/util/validation): what a taint value must match.
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
SINCE = 1_780_000_000  # 2026-05-28T20:26:40Z
ADDED = "2026-05-28T20:26:40Z"


# ---- the value: a cpuset as a label value ----------------------------------------------------


@pytest.mark.parametrize(
    ("cpus", "value"),
    [
        pytest.param("", "", id="no CPUs, no value"),
        pytest.param("7", "7", id="one CPU"),
        pytest.param("0-3,8", "0-3_8", id="ranges joined by underscores"),
        pytest.param("12,32", "12_32", id="two threads of a core"),
        pytest.param(
            ",".join(str(c) for c in range(0, 200, 2)),
            "0_2_4_6_8_10_12_14_16_18_20_22_24_26_28_30_32_34_36_38_plus-80",
            id="too long: whole ranges that fit, then how many CPUs are left out",
        ),
    ],
)
def test_a_cpuset_is_written_as_a_label_value(cpus: str, value: str) -> None:
    written = cpus_value(CPUSet.parse(cpus))
    assert written == value
    assert len(written) <= MAX_VALUE and LABEL_VALUE.match(written)


@pytest.mark.parametrize("step", [1, 2, 3, 5, 7])
def test_every_long_cpuset_makes_a_valid_label_value(step: int) -> None:
    for count in range(1, 400, 37):
        written = cpus_value(CPUSet(range(0, count * step, step)))
        assert len(written) <= MAX_VALUE and LABEL_VALUE.match(written), written


def test_time_added_is_rfc3339_in_whole_seconds_as_the_api_server_writes_it_back() -> None:
    assert timestamp(SINCE + 0.9) == ADDED


# ---- one device's taints ----------------------------------------------------------------------


def _health(status: str, missing: str = "", since: int = SINCE) -> allocator_pb2.DeviceHealth:
    return allocator_pb2.DeviceHealth(status=status, missing_cpus=missing, since_unix=since)


@pytest.mark.parametrize(
    ("health", "published", "taints"),
    [
        pytest.param(None, [], [], id="no health reported: no taint"),
        pytest.param(_health("Healthy"), [], [], id="healthy: no taint"),
        pytest.param(
            _health("Unknown"), [], [], id="unknown (topology unreadable): no taint"
        ),
        pytest.param(
            _health("Unhealthy", "12,32"),
            [],
            [{"key": OFFLINE, "value": "12_32", "effect": "NoSchedule", "timeAdded": ADDED}],
            id="offline CPUs: dra.cpu/offline naming them, added when the health changed",
        ),
        pytest.param(
            _health("Unhealthy"),
            [],
            [{"key": UNHEALTHY, "value": "10-19_30-39", "effect": "NoSchedule",
              "timeAdded": ADDED}],
            id="unhealthy for another reason: dra.cpu/unhealthy naming the device's CPUs",
        ),
        pytest.param(
            _health("Unhealthy", "12-13,32", since=SINCE + 600),
            [{"key": OFFLINE, "value": "12_32", "effect": "NoSchedule",
              "timeAdded": "2026-01-01T00:00:00Z"}],
            [{"key": OFFLINE, "value": "12-13_32", "effect": "NoSchedule",
              "timeAdded": "2026-01-01T00:00:00Z"}],
            id="more CPUs offline: the value follows, the time the taint appeared is kept",
        ),
    ],
)  # fmt: skip
def test_a_device_is_tainted_by_its_health(
    health: allocator_pb2.DeviceHealth | None,
    published: list[dict[str, Any]],
    taints: list[dict[str, Any]],
) -> None:
    assert health_taints(health, CPUSet.parse("10-19,30-39"), published, SINCE + 1000) == taints


# ---- the devices of a slice -------------------------------------------------------------------


def _devices(health: dict[str, allocator_pb2.DeviceHealth]) -> allocator_pb2.DeviceList:
    return allocator_pb2.DeviceList(
        devices=[
            allocator_pb2.Device(name="cpudev000", cpus="0"),
            allocator_pb2.Device(name="cpudev002", cpus="2"),
        ],
        health=health,
    )


DOCUMENTS = [{"name": "cpudev000"}, {"name": "cpudev002"}]
WITHDRAWN = {"name": "cpudev001", "capacity": {"dra.cpu/cpu": {"value": "1"}}}


def test_a_device_withdrawn_for_its_offline_cpus_stays_published_tainted() -> None:
    devices = _devices(
        {"cpudev000": _health("Healthy"), "cpudev001": _health("Unhealthy", "1"),
         "cpudev002": _health("Healthy")}
    )  # fmt: skip
    published = {"cpudev001": WITHDRAWN}
    out = tainted(DOCUMENTS, devices, published, SINCE)
    assert [d["name"] for d in out] == ["cpudev000", "cpudev001", "cpudev002"]
    assert out[1] == {
        **WITHDRAWN,
        "taints": [{"key": OFFLINE, "value": "1", "effect": "NoSchedule", "timeAdded": ADDED}],
    }
    assert "taints" not in out[0] and "taints" not in out[2]
    # Where the server has no taints the device cannot be marked, so it is withdrawn.
    assert tainted(DOCUMENTS, devices, published, SINCE, keep_withdrawn=False) == DOCUMENTS


def test_a_withdrawn_device_goes_back_in_its_place_among_numbered_devices() -> None:
    devices = allocator_pb2.DeviceList(
        devices=[allocator_pb2.Device(name=f"cpudev{i:03d}", cpus=str(i)) for i in (998, 1000)],
        health={"cpudev999": _health("Unhealthy", "999")},
    )
    documents = [{"name": "cpudev998"}, {"name": "cpudev1000"}]
    out = tainted(documents, devices, {"cpudev999": {"name": "cpudev999"}}, SINCE)
    assert [d["name"] for d in out] == ["cpudev998", "cpudev999", "cpudev1000"]


def test_a_withdrawn_device_never_published_or_back_to_health_is_not_invented() -> None:
    offline = _devices({"cpudev001": _health("Unhealthy", "1")})
    assert tainted(DOCUMENTS, offline, {}, SINCE) == DOCUMENTS
    back = _devices({"cpudev001": _health("Healthy")})
    assert tainted(DOCUMENTS, back, {"cpudev001": WITHDRAWN}, SINCE) == DOCUMENTS


def test_another_owners_taints_on_a_published_device_are_not_ours_to_keep() -> None:
    theirs = {"key": "example.com/maintenance", "effect": "NoSchedule", "timeAdded": ADDED}
    published = {"cpudev000": {"name": "cpudev000", "taints": [theirs]}}
    assert tainted(DOCUMENTS, _devices({}), published, SINCE) == DOCUMENTS


def test_taints_make_a_slice_hold_at_most_64_devices() -> None:
    documents = [{"name": f"cpudev{i:03d}"} for i in range(100)]
    documents[5] = {**documents[5], "taints": [{"key": OFFLINE, "effect": "NoSchedule"}]}
    support = FeatureSupport()
    assert [len(c) for c in chunk_documents(documents, support.advanced(documents))] == [64, 36]
    untainted = [{"name": d["name"]} for d in documents]
    assert [len(c) for c in chunk_documents(untainted, support.advanced(untainted))] == [100]


def test_a_server_that_drops_taints_gets_devices_without_them() -> None:
    support = FeatureSupport()
    sent = [{"name": "cpudev000", "taints": [{"key": OFFLINE, "effect": "NoSchedule"}]}]
    (missing,) = support.dropped(sent, [{"name": "cpudev000"}])
    assert missing.gate == "DRADeviceTaints" and "taints" in missing.reason
    assert support.devices(sent) == [{"name": "cpudev000"}]


# ---- on a running node ------------------------------------------------------------------------


def _published(node: Node) -> dict[str, dict[str, Any]]:
    return {d["name"]: d for s in node.slices() for d in s["spec"].get("devices") or []}


def _taints(node: Node) -> dict[str, list[tuple[str, str, str]]]:
    return {
        name: [(t["key"], t.get("value", ""), t["effect"]) for t in d.get("taints") or []]
        for name, d in _published(node).items()
    }


async def test_a_grouped_device_with_offline_cpus_is_tainted_until_they_return(
    node: Node,
) -> None:
    await node.start_topology("--watch-interval", "0.1")
    await node.start_allocator("--topology-refresh", "0.2")
    await node.start_plugin()
    hotplug = Hotplug(node.sysfs)
    untainted = {"cpudevnuma000": [], "cpudevnuma001": []}
    await eventually(lambda: _taints(node) == untainted, "both devices published untainted")

    hotplug.offline([12, 32], online="0-11,13-31,33-39")
    tainted_numa1 = {
        "cpudevnuma000": [],
        "cpudevnuma001": [(OFFLINE, "12_32", "NoSchedule")],
    }
    await eventually(lambda: _taints(node) == tainted_numa1, "NUMA node 1's device tainted")
    (taint,) = _published(node)["cpudevnuma001"]["taints"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", taint["timeAdded"])
    # The device is still offered for what it has left: 18 CPUs.
    assert _published(node)["cpudevnuma001"]["capacity"]["dra.cpu/cpu"] == {"value": "18"}

    hotplug.online([12, 32])
    await eventually(lambda: _taints(node) == untainted, "the taint lifted with the CPUs back")


async def test_an_individual_device_whose_cpu_goes_offline_stays_published_tainted(
    node: Node,
) -> None:
    node.configure(cpuDeviceMode="individual", minSharedCPUs=0)
    await node.start_topology("--watch-interval", "0.1")
    await node.start_allocator("--topology-refresh", "0.2")
    await node.start_plugin()
    hotplug = Hotplug(node.sysfs)
    await eventually(lambda: len(_published(node)) == 40, "every CPU's device published")
    (name,) = [n for n, d in _published(node).items()
               if d["attributes"]["dra.cpu/cpuID"] == {"int": 39}]  # fmt: skip
    before = _published(node)[name]

    hotplug.offline([39], online="0-38")

    def offline_taints() -> dict[str, list[tuple[str, str, str]]]:
        return {n: t for n, t in _taints(node).items() if t}

    await eventually(
        lambda: offline_taints() == {name: [(OFFLINE, "39", "NoSchedule")]},
        f"{name} kept and tainted",
    )
    assert len(_published(node)) == 40
    kept = _published(node)[name]
    assert {k: v for k, v in kept.items() if k != "taints"} == before

    # A new plugin process finds the device in the slices and keeps it as it was.
    node.stop("plugin")
    await node.start_plugin()

    async def synced() -> bool:
        async with rpc.channel(node.sock("plugin")) as chan:
            status = await dra_plugin_pb2_grpc.DRAPluginViewStub(chan).GetStatus(
                dra_plugin_pb2.GetStatusRequest(), timeout=5
            )
        return status.last_published_at_unix > 0 and not status.last_publish_error

    await eventually(synced, "the new plugin's first sync")
    assert _published(node)[name] == kept  # timeAdded included

    hotplug.online([39])
    await eventually(lambda: offline_taints() == {}, "no taint once CPU 39 is back")
    assert _published(node)[name] == before
