"""/v1/devices carries each device's health as the allocator judges it, and the devices
withdrawn because their CPUs went offline."""

from __future__ import annotations

from dracpu.api import models, translate
from dracpu.pb.allocator.v1 import allocator_pb2 as pb

UNAVAILABLE = models.Unavailable(service="dra-plugin", reason="not asked")


def test_health_and_withdrawn_devices() -> None:
    reply = pb.DeviceList(
        generation=3,
        driver="dra.cpu",
        mode="individual",
        devices=[pb.Device(name="cpudev000", cpus="0"), pb.Device(name="cpudev001", cpus="1")],
        health={
            "cpudev000": pb.DeviceHealth(status="Healthy", message="CPUs online", since_unix=10),
            "cpudev001": pb.DeviceHealth(status="Unknown", message="the CPU topology cannot…"),
            "cpudev002": pb.DeviceHealth(
                status="Unhealthy", message="CPUs 2 offline", missing_cpus="2", since_unix=20
            ),
        },
    )
    view = translate.devices(reply, pb.ClaimList(), UNAVAILABLE)
    health = {d.name: d.health for d in view.devices}
    assert health["cpudev000"] is not None and health["cpudev000"].status == "Healthy"
    assert health["cpudev001"] is not None and health["cpudev001"].since is None
    assert list(view.withdrawn) == ["cpudev002"]
    assert view.withdrawn["cpudev002"].missing_cpus == "2"
    assert view.withdrawn["cpudev002"].status == "Unhealthy"


def test_an_allocator_without_health_leaves_it_unset() -> None:
    reply = pb.DeviceList(driver="dra.cpu", devices=[pb.Device(name="cpudevnuma000", cpus="0-3")])
    view = translate.devices(reply, pb.ClaimList(), UNAVAILABLE)
    assert view.devices[0].health is None
    assert view.withdrawn == {}
