"""/v1/devices carries each device's health as the allocator judges it, and the devices
withdrawn because their CPUs went offline; /v1/shared-pool says when it runs on isolated CPUs."""

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


def test_shared_pool_says_when_it_runs_on_isolated_cpus() -> None:
    reply = pb.SharedPool(
        cpus="2-3", reserved="", online="0-3", exclusive="0-1", generation=2,
        isolated="2-3", on_isolated=True,
    )  # fmt: skip
    view = translate.shared_pool(reply)
    assert (view.cpus, view.isolated, view.on_isolated) == ("2-3", "2-3", True)


def test_shared_pool_of_an_older_allocator_has_no_isolation() -> None:
    view = translate.shared_pool(pb.SharedPool(cpus="0-3", online="0-3", generation=1))
    assert (view.isolated, view.on_isolated) == ("", False)
