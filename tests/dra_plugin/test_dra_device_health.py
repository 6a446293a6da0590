"""Device health that follows the CPUs: the real topology service, allocator and dra-plugin on
a sysfs fixture whose CPUs go offline and come back, watched through the kubelet's
DRAResourceHealth streams (v1 and v1alpha1), the allocator's DeviceList and its metrics.

xeon-2s-ht: cpudevnuma000 = CPUs 0-9,20-29, cpudevnuma001 = CPUs 10-19,30-39.
"""

from __future__ import annotations

import pytest
from harness.dra_plugin_node import Node
from harness.hotplug import Hotplug
from harness.waits import eventually

from dracpu.core import rpc
from dracpu.dev.kubelet_sim import HealthEntry, KubeletSim, RegisteredPlugin
from dracpu.pb.allocator.v1 import allocator_pb2, allocator_pb2_grpc
from dracpu.pb.common.v1 import info_pb2, info_pb2_grpc

pytestmark = pytest.mark.timeout(120)

FAST = ("--watch-interval", "0.1")


async def snapshot(plugin: RegisteredPlugin, version: str) -> dict[str, HealthEntry]:
    stream = plugin.watch_health(version=version)
    async for entries in stream:
        if entries:
            await stream.aclose()
            return {e.device: e for e in entries}
    return {}


async def health_is(
    plugin: RegisteredPlugin,
    expected: dict[str, str],
    what: str,
    saying: dict[str, str] | None = None,
) -> dict[str, HealthEntry]:
    """Wait until both API versions stream exactly `expected` (device -> health), each device
    of `saying` with that text in its message (a change the topology shows in steps, such as
    two CPUs going offline one after the other, is waited for whole)."""
    found: dict[str, HealthEntry] = {}
    for version in ("v1", "v1alpha1"):

        async def matches(version: str = version) -> bool:
            nonlocal found
            found = await snapshot(plugin, version)
            said = all(text in found[d].message for d, text in (saying or {}).items() if d in found)
            return {name: e.health for name, e in found.items()} == expected and said

        await eventually(matches, f"{what} ({version})", timeout=30)
    return found


async def allocator_health(node: Node) -> dict[str, allocator_pb2.DeviceHealth]:
    async with rpc.channel(node.sock("allocator")) as chan:
        reply = await allocator_pb2_grpc.AllocatorStub(chan).ListDevices(
            allocator_pb2.ListDevicesRequest(), timeout=5
        )
    return dict(reply.health)


async def allocator_metrics(node: Node) -> str:
    async with rpc.channel(node.sock("allocator")) as chan:
        reply = await info_pb2_grpc.InfoStub(chan).GetMetrics(
            info_pb2.GetMetricsRequest(), timeout=5
        )
    return str(reply.text)


async def test_cpus_going_offline_make_their_device_unhealthy_until_they_return(
    node: Node,
) -> None:
    await node.start_topology(*FAST)
    await node.start_allocator("--topology-refresh", "0.2")
    await node.start_plugin("--health-interval", "0.3")
    plugin = await KubeletSim(node.kubelet_root).register("dra.cpu", timeout=15)
    hotplug = Hotplug(node.sysfs)
    both_healthy = {"cpudevnuma000": "HEALTHY", "cpudevnuma001": "HEALTHY"}

    await health_is(plugin, both_healthy, "every device healthy at start")

    # A core of NUMA node 1 goes offline (both of its threads).
    hotplug.offline([12, 32], online="0-11,13-31,33-39")
    entries = await health_is(
        plugin,
        {"cpudevnuma000": "HEALTHY", "cpudevnuma001": "UNHEALTHY"},
        "the device with offline CPUs unhealthy",
        saying={"cpudevnuma001": "12,32"},
    )
    assert "12,32" in entries["cpudevnuma001"].message
    reported = await allocator_health(node)
    assert reported["cpudevnuma001"].status == "Unhealthy"
    assert reported["cpudevnuma001"].missing_cpus == "12,32"
    assert reported["cpudevnuma000"].status == "Healthy"
    metrics = await allocator_metrics(node)
    assert 'dra_cpu_device_unhealthy{device="cpudevnuma001",health="Unhealthy"} 1.0' in metrics
    assert 'dra_cpu_devices{health="Unhealthy"} 1.0' in metrics

    # The topology cannot be read at all: nobody knows.
    (node.sysfs / "devices").rename(node.sysfs / "moved")
    entries = await health_is(
        plugin,
        {"cpudevnuma000": "UNKNOWN", "cpudevnuma001": "UNKNOWN"},
        "every device unknown while sysfs is unreadable",
    )
    assert "topology cannot be read" in entries["cpudevnuma000"].message
    assert 'dra_cpu_devices{health="Unknown"} 2.0' in await allocator_metrics(node)

    # Readable again, CPUs still offline.
    (node.sysfs / "moved").rename(node.sysfs / "devices")
    await health_is(
        plugin,
        {"cpudevnuma000": "HEALTHY", "cpudevnuma001": "UNHEALTHY"},
        "back to what the topology says",
    )

    hotplug.online([12, 32])
    await health_is(plugin, both_healthy, "every device healthy once the CPUs are back")
    assert 'dra_cpu_devices{health="Healthy"} 2.0' in await allocator_metrics(node)
    allocator_log = node.log("allocator").read_text()
    assert "device not healthy" in allocator_log and "device healthy again" in allocator_log
    await plugin.close()


async def test_a_device_withdrawn_with_its_cpus_is_reported_unhealthy(node: Node) -> None:
    """Individual mode: the device of an offline CPU leaves the slice, and the kubelet (which
    may have a pod on it) is told it is unhealthy rather than hearing nothing."""
    node.configure(cpuDeviceMode="individual")
    await node.start_topology(*FAST)
    await node.start_allocator("--topology-refresh", "0.2")
    await node.start_plugin("--health-interval", "0.3")
    plugin = await KubeletSim(node.kubelet_root).register("dra.cpu", timeout=15)
    hotplug = Hotplug(node.sysfs)
    before = await allocator_health(node)
    assert len(before) == 40 and {h.status for h in before.values()} == {"Healthy"}

    hotplug.offline([39], online="0-38")

    async def withdrawn() -> list[str]:
        health = await allocator_health(node)
        return [n for n, h in health.items() if h.status == "Unhealthy"]

    (name,) = await eventually(withdrawn, "one unhealthy device", timeout=30)
    entry = (await allocator_health(node))[name]
    assert entry.missing_cpus == "39"

    async def streamed() -> dict[str, HealthEntry] | None:
        entries = await snapshot(plugin, "v1")
        return entries if entries[name].health == "UNHEALTHY" else None

    entries = await eventually(streamed, f"{name} streamed unhealthy", timeout=30)
    assert len(entries) == 40 and "withdrawn" in entries[name].message

    hotplug.online([39])

    async def all_healthy() -> bool:
        health = await allocator_health(node)
        return len(health) == 40 and {h.status for h in health.values()} == {"Healthy"}

    await eventually(all_healthy, "every device healthy again", timeout=30)
    await plugin.close()
