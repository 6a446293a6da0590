"""Slices kept by list + watch against a loopback API server: repairs without a timer, 410
Gone, the Node's UID followed, features the server lacks left out once, its reasons logged; the
allocator's devices followed on its watch, or asked periodically from one without it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from harness.dra_plugin_node import NODE, NODE_UID
from harness.waits import eventually, never

from dracpu.core.errors import InvalidInputError, NotFoundError, UnimplementedError
from dracpu.dev.apiserver import Store, fake_apiserver
from dracpu.dra_plugin.cluster.api_features import FeatureSupport
from dracpu.dra_plugin.cluster.apiserver import KubernetesAPI
from dracpu.dra_plugin.common.waits import wait_set
from dracpu.dra_plugin.publishing.publisher import SlicePublisher
from dracpu.dra_plugin.publishing.slice_watch import SliceWatch
from dracpu.pb.allocator.v1 import allocator_pb2 as pb

pytestmark = pytest.mark.timeout(120)
NEW_UID = "0b0d8f2e-0000-4000-8000-00000000000b"
TEARDOWN = 10.0  # seconds a cancelled publisher and its watch may take to end


class Devices:
    """An allocator stand-in of an older release (no device watch): list_devices answers
    whatever `current` holds."""

    def __init__(self, count: int, **extra: Any) -> None:
        self.current = pb.DeviceList(generation=1, driver="dra.cpu")
        self.asked = 0  # list_devices calls: one per publish round
        for i in range(count):
            device = self.current.devices.add(name=f"cpudev{i:03d}")
            device.attributes["dra.cpu/numaNode"].int = i % 2
            if extra.get("lists"):
                device.attributes["resource.kubernetes.io/pcieRoot"].strings.values.append("pci0")
                self.current.uses_list_attributes = True
            if extra.get("mapping"):
                device.node_allocatable_resources["cpu"].device_multiplier = "1"

    async def list_devices(self, deadline: float | None = None) -> pb.DeviceList:
        self.asked += 1
        answer = pb.DeviceList()
        answer.CopyFrom(self.current)  # a new message per call, as over gRPC
        return answer

    async def watch_devices(self) -> AsyncIterator[pb.DeviceList]:
        raise UnimplementedError("watch the devices: Method not found!")
        yield self.current  # never reached: the yield makes this a stream, as the client's


class PushingDevices(Devices):
    """An allocator stand-in with the device watch: every list put in `pushed` is sent."""

    def __init__(self, count: int) -> None:
        super().__init__(count)
        self.pushed: asyncio.Queue[pb.DeviceList] = asyncio.Queue()
        self.pushed.put_nowait(self.current)

    async def watch_devices(self) -> AsyncIterator[pb.DeviceList]:
        while True:
            yield await self.pushed.get()


async def soon(check: Callable[[], Any], what: str) -> Any:
    async def wrapped() -> Any:
        return check()

    return await eventually(wrapped, what)


def node(store: Store, uid: str = NODE_UID) -> None:
    with store.lock:
        store.nodes[NODE] = {"apiVersion": "v1", "kind": "Node",
                             "metadata": {"name": NODE, "uid": uid}}  # fmt: skip


def ours(store: Store) -> list[dict[str, Any]]:
    with store.lock:
        return [s for s in store.slices.values() if s["spec"]["driver"] == "dra.cpu"]


def writes(store: Store) -> int:
    with store.lock:
        return sum(1 for method, path in store.requests if method in ("POST", "PUT", "DELETE"))


@contextlib.asynccontextmanager
async def publishing(
    tmp_path: Path, devices: Devices, **options: Any
) -> AsyncIterator[tuple[Store, SlicePublisher, SliceWatch]]:
    with fake_apiserver(tmp_path) as (store, kubeconfig):
        node(store)
        api = KubernetesAPI(str(kubeconfig))
        watch = SliceWatch(api, "dra.cpu", NODE, min_watch_timeout=options.pop("watch", 300))
        publisher = SlicePublisher(
            driver="dra.cpu", node=NODE, cluster=api, allocator=devices,  # type: ignore[arg-type]
            poll_interval=0.1, resync_interval=3600, watch=watch, **options,
        )  # fmt: skip
        task = asyncio.create_task(publisher.run())
        try:
            yield store, publisher, watch
        finally:
            # Open watches end first, so the server thread serving one finishes on its own.
            with store.lock:
                store.closed = True
                store.changed.notify_all()
            await stop(task)
            await api.aclose()


async def stop(task: asyncio.Task[None]) -> None:
    """Cancel the publisher: it ends promptly, its watch too, never waited on for ever."""
    task.cancel()
    await asyncio.wait({task}, timeout=TEARDOWN)
    assert task.done(), f"the publisher did not end within {TEARDOWN} s of its cancellation"
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def test_a_slice_deleted_or_edited_by_someone_else_is_repaired_without_a_resync(
    tmp_path: Path,
) -> None:
    devices = Devices(130)
    async with publishing(tmp_path, devices) as (store, _, watch):
        await soon(lambda: _count(store, 130), what="130 devices in two slices")
        listed = watch.stats.lists
        (first, second) = sorted(ours(store), key=lambda s: s["metadata"]["name"])
        store.remove_slice(first["metadata"]["name"])
        await soon(lambda: _count(store, 130), what="the deleted slice recreated")
        edited = dict(second, spec=dict(second["spec"], devices=second["spec"]["devices"][:1]))
        store.put_slice(edited)
        await soon(lambda: _count(store, 130), what="the edited slice repaired")
        # The watch told; nothing was listed again and the resync (an hour) never ran.
        assert watch.stats.lists == listed == 1
        # A converged pool is left alone: no write over several more publish rounds.
        before, rounds = writes(store), devices.asked
        await never(
            lambda: writes(store) - before,
            "a write to the converged pool",
            until=lambda: devices.asked >= rounds + 5,
        )


async def test_devices_the_allocator_pushes_are_published_without_asking_for_them(
    tmp_path: Path,
) -> None:
    devices = PushingDevices(4)
    async with publishing(tmp_path, devices) as (store, publisher, _):
        await soon(lambda: _count(store, 4), what="4 devices published")
        grown = pb.DeviceList()
        grown.CopyFrom(devices.current)
        grown.generation = 2
        grown.devices.add(name="cpudev004")
        devices.pushed.put_nowait(grown)
        await soon(lambda: _count(store, 5), what="the pushed fifth device published")
        assert publisher.feed.mode == "watch"
        assert devices.asked == 0


async def test_an_allocator_without_the_device_watch_is_asked_for_its_devices(
    tmp_path: Path,
) -> None:
    devices = Devices(4)
    async with publishing(tmp_path, devices) as (store, publisher, _):
        await soon(lambda: _count(store, 4), what="4 devices published")
        assert publisher.feed.mode == "poll"
        devices.current.devices.add(name="cpudev004")
        devices.current.generation = 2
        await soon(lambda: _count(store, 5), what="the fifth device, asked for, published")


async def test_a_compacted_resource_version_relists(tmp_path: Path) -> None:
    async with publishing(tmp_path, Devices(4), watch=0.5) as (store, _, watch):
        await soon(lambda: _count(store, 4), what="slices")
        store.compact()
        await soon(lambda: watch.stats.expired >= 1, what="410 Gone seen")
        await soon(lambda: watch.stats.lists >= 2, what="listed again")
        (mine,) = ours(store)
        store.remove_slice(mine["metadata"]["name"])
        await soon(lambda: _count(store, 4), what="repaired after the relist")


async def test_a_recreated_node_gets_its_slices_back_with_the_new_uid(tmp_path: Path) -> None:
    async with publishing(tmp_path, Devices(200)) as (store, publisher, _):
        await soon(lambda: _count(store, 200), what="slices")
        assert {s["metadata"]["ownerReferences"][0]["uid"] for s in ours(store)} == {NODE_UID}
        # The Node is replaced; the garbage collector removes what the old one owned.
        node(store, NEW_UID)
        for s in ours(store):
            store.remove_slice(s["metadata"]["name"])

        def owned_by_new_node() -> bool:
            slices = ours(store)
            owners = {s["metadata"]["ownerReferences"][0]["uid"] for s in slices}
            return _count(store, 200) and owners == {NEW_UID}

        await soon(owned_by_new_node, what="slices owned by the new Node")
        assert publisher.state.owner_uid == NEW_UID


async def test_slices_of_the_old_node_are_reowned_at_the_resync(tmp_path: Path) -> None:
    # No garbage collector ran: the safety-net resync reads the Node and rewrites the owner.
    async with publishing(tmp_path, Devices(4)) as (store, publisher, _):
        await soon(lambda: _count(store, 4), what="slices")
        node(store, NEW_UID)
        publisher.resync_every(0.2)

        def reowned() -> bool:
            (mine,) = ours(store)
            return bool(mine["metadata"]["ownerReferences"][0]["uid"] == NEW_UID)

        await soon(reowned, what="owner rewritten")


async def test_a_dropped_node_allocatable_mapping_is_noticed_once_and_not_rewritten(
    tmp_path: Path,
) -> None:
    missing: list[str] = []
    features = FeatureSupport(on_missing=lambda m: missing.append(m.name))
    devices = Devices(4, mapping=True)
    async with publishing(tmp_path, devices, features=features) as (store, publisher, _):
        store.drop_device_fields.add("nodeAllocatableResources")
        await soon(lambda: missing, what="the dropped field noticed")
        before = writes(store)
        publisher.resync_every(0.1)
        await soon(lambda: publisher.state.syncs >= 5, what="several resyncs")
        assert writes(store) == before  # nothing to rewrite: the field is left out now
        assert missing == ["nodeAllocatableResources"]
        (state,) = publisher.state.missing_features
        assert state.gate == "DRANodeAllocatableResources"
        assert "dropped spec.devices[].nodeAllocatableResources" in state.reason


async def test_refused_list_attributes_are_left_out_with_the_server_message(
    tmp_path: Path,
) -> None:
    # What kube-apiserver 1.37 answers without DRAListTypeAttributes: it drops the list and
    # then finds the attribute empty.
    message = (
        'ResourceSlice.resource.k8s.io "x" is invalid: spec.devices[0].attributes['
        'resource.kubernetes.io/pcieRoot]: Invalid value: "": must specify one of: `int`, '
        "`bool`, `string`, `version`, `ints`, `bools`, `strings`, `versions`"
    )
    async with publishing(tmp_path, Devices(100, lists=True)) as (store, publisher, _):
        with store.lock:
            store.refuse['"strings"'] = (422, "Invalid", message)
        await soon(lambda: _count(store, 100), what="slices without list attributes")
        slices = ours(store)
        assert len(slices) == 1  # 128 per slice again once no device has a list attribute
        device = slices[0]["spec"]["devices"][0]
        assert device["attributes"] == {"dra.cpu/numaNode": {"int": 0}}
        (state,) = publisher.state.missing_features
        assert (state.name, state.reason) == ("listTypeAttributes", f"create resourceslice: "
                                               f"422 Unprocessable Entity: {message}")  # fmt: skip


async def test_errors_carry_the_server_reason(tmp_path: Path) -> None:
    with fake_apiserver(tmp_path) as (store, kubeconfig):
        api = KubernetesAPI(str(kubeconfig))
        with pytest.raises(
            NotFoundError, match=r'404 Not Found: resourceclaims\.resource\.k8s\.io "c1" not found'
        ):
            await api.get_claim("ns", "c1")
        store.refuse["cpudev"] = (403, "Forbidden", "node x may not publish this")
        pool = {"name": NODE, "generation": 1, "resourceSliceCount": 1}
        spec = {"driver": "dra.cpu", "nodeName": NODE, "devices": [{"name": "cpudev0"}]}
        body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                "metadata": {"generateName": "s-"}, "spec": spec | {"pool": pool}}  # fmt: skip
        with pytest.raises(Exception, match="403 Forbidden: node x may not publish this"):
            await api.create_slice(body)
        store.refuse["cpudev"] = (422, "Invalid", "spec.devices[0].name: Invalid value")
        with pytest.raises(InvalidInputError, match=r"422 Unprocessable Entity: spec\.devices"):
            await api.create_slice(body)


def _count(store: Store, devices: int) -> bool:
    slices = ours(store)
    generations = {s["spec"]["pool"]["generation"] for s in slices}
    total = sum(len(s["spec"]["devices"]) for s in slices)
    complete = all(s["spec"]["pool"]["resourceSliceCount"] == len(slices) for s in slices)
    return total == devices and len(generations) == 1 and complete


async def test_an_unreachable_api_server_is_reported_not_waited_on(tmp_path: Path) -> None:
    with fake_apiserver(tmp_path) as (_, kubeconfig):
        api = KubernetesAPI(str(kubeconfig))
    # The server is gone: the first list cannot succeed, and the status says why.
    watch = SliceWatch(api, "dra.cpu", NODE)
    publisher = SlicePublisher(
        driver="dra.cpu", node=NODE, cluster=api, allocator=Devices(2),  # type: ignore[arg-type]
        poll_interval=0.1, watch=watch,
    )  # fmt: skip
    task = asyncio.create_task(publisher.run())
    try:
        error = await soon(lambda: publisher.state.last_error, what="a publish error")
        assert error.startswith(("get node node-a: ", "ResourceSlices not listed yet: "))
        await soon(lambda: watch.stats.last_error.startswith("list resourceslices: "),
                   what="the watch's own error")  # fmt: skip
        assert not watch.synced.is_set()
    finally:
        await stop(task)
        await api.aclose()


async def test_a_loop_cancelled_just_as_its_event_is_set_still_ends() -> None:
    """The publisher, the status writer and device health wait on an Event with a time limit;
    a cancellation arriving in the same turn as the event must not be lost (it is with
    asyncio.wait_for on Python 3.11: the loop went on and teardown waited for ever)."""
    event = asyncio.Event()

    async def loop() -> None:
        await wait_set(event, 60)
        await asyncio.sleep(3600)  # reached only when the cancellation was lost

    task = asyncio.create_task(loop())
    await asyncio.sleep(0)  # the task waits on the event
    event.set()
    task.cancel()
    await asyncio.wait({task}, timeout=1)
    assert task.cancelled()
    assert await wait_set(asyncio.Event(), 0.01) is False  # the time limit still holds
