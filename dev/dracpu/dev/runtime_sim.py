"""A stand-in for the container runtime's side of NRI, for tests and `dracpu dev`.

It listens on an NRI socket like containerd or CRI-O, accepts plugins, and drives them the way
containerd/nri pkg/adaptation does: RegisterPlugin (name/index checked) -> Configure (event mask
checked against the emulated NRI version) -> Synchronize (whole, or chunked with `more`) ->
lifecycle calls in plugin index order. It keeps each container's cpuset, applies adjustments
and updates as the runtime would, and applies plugin-initiated UpdateContainers.

It speaks the real wire protocol through dracpu.nri_plugin's transport (mux + ttrpc), so a
plugin that works against it also sends the exact bytes a Go runtime reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from dracpu.core.driver import DRIVER_NAME
from dracpu.core.errors import DracpuError
from dracpu.core.log import get_logger
from dracpu.core.tasks import within
from dracpu.nri_plugin.transport.event_masks import (
    VALID_MASK_BEFORE_V0_10,
    VALID_MASK_FROM_V0_10,
    event_bit,
    valid_plugin_index,
    valid_plugin_name,
)
from dracpu.nri_plugin.transport.mux import PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN, Mux
from dracpu.nri_plugin.transport.stub import PLUGIN_SERVICE, RUNTIME_SERVICE
from dracpu.nri_plugin.transport.ttrpc import UNIMPLEMENTED, Channel, TtrpcError
from dracpu.pb.nri import api_pb2

log = get_logger(__name__)


class CreateContainerError(DracpuError):
    """A plugin refused the container (the kubelet would show CreateContainerError)."""


class UpdateContainerError(DracpuError):
    """A plugin refused another party's update of a container (the CRI call fails)."""


@dataclass(frozen=True)
class RuntimeProfile:
    """Which runtime and NRI version to emulate."""

    name: str = "containerd"
    version: str = "v2.4.0"
    nri_version: str = "v0.12.3"  # "" = runtime older than NRI v0.12 (field absent)
    dedicated_remove: bool = True  # v0.12: RemoveContainer RPC, StateChange fallback
    events_v0_10: bool = True  # events 12-14 valid
    registration_timeout: float = 5.0
    request_timeout: float = 2.0
    sync_chunk: int = 0  # > 0: send Synchronize in chunks of this many containers


CONTAINERD_2_0 = RuntimeProfile(
    name="containerd",
    version="v2.0.0",
    nri_version="",
    dedicated_remove=False,
    events_v0_10=False,
)

# CRI-O 1.34: NRI v0.9 (no version in Configure, no RemoveContainer, events up to 11), and no
# hold on container creation while a plugin synchronizes (begin_create models that window).
CRIO_1_34 = RuntimeProfile(
    name="cri-o",
    version="1.34.0",
    nri_version="",
    dedicated_remove=False,
    events_v0_10=False,
)


@dataclass
class PluginConn:
    name: str
    index: str
    mux: Mux
    client: Channel
    events: int = 0
    admitted: bool = False
    closed: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def key(self) -> str:
        return f"{self.index}-{self.name}"


@dataclass(frozen=True)
class InFlight:
    """A container whose creation began (CreateContainer answered) and has not ended."""

    container: api_pb2.Container
    updates: list[api_pb2.ContainerUpdate]  # the other containers' updates from the answers


@dataclass
class UnsolicitedBatch:
    plugin: str
    updates: list[tuple[str, str]]  # (container id, cpus)
    failed: list[str]


class RuntimeSim:
    """The runtime end of the NRI socket. Use as `async with RuntimeSim(path) as rt:`."""

    def __init__(self, socket_path: str, profile: RuntimeProfile | None = None) -> None:
        self.socket_path = socket_path
        self.profile = profile or RuntimeProfile()
        self.pods: dict[str, api_pb2.PodSandbox] = {}
        self.containers: dict[str, api_pb2.Container] = {}
        self.unsolicited: list[UnsolicitedBatch] = []
        self.plugins: list[PluginConn] = []
        self.rejections: list[str] = []
        self.sync_seconds: list[float] = []  # duration of each plugin's whole Synchronize
        # Containers being stopped: still listed, but an update of theirs fails (runc: "container
        # not running"), as one the kubelet is stopping while a plugin synchronizes.
        self.stopping: set[str] = set()
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._changed = asyncio.Condition()
        self._lock = asyncio.Lock()  # lifecycle calls and plugin admission, as the adaptation
        self._ids = itertools.count(1)

    async def __aenter__(self) -> RuntimeSim:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- listening ----------------------------------------------------------------------------

    async def start(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)
        os.makedirs(os.path.dirname(self.socket_path) or ".", exist_ok=True)
        self._server = await asyncio.start_unix_server(self._accept, path=self.socket_path)

    async def stop(self) -> None:
        """Close the socket and every plugin connection (a runtime going down)."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for plugin in list(self.plugins):
            plugin.mux.close(ConnectionAbortedError("runtime stopping"))
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.plugins.clear()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)

    async def restart(self) -> None:
        """Runtime restart: plugins lose their connection; containers keep running."""
        await self.stop()
        await self.start()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        mux = Mux(reader, writer)
        registered: asyncio.Future[tuple[str, str]] = asyncio.get_running_loop().create_future()

        async def register(payload: bytes) -> bytes:
            request = api_pb2.RegisterPluginRequest()
            request.ParseFromString(payload)
            if not valid_plugin_name(request.plugin_name):
                err = TtrpcError(2, f"invalid plugin name {request.plugin_name!r}")
                if not registered.done():
                    registered.set_exception(err)
                raise err
            if not valid_plugin_index(request.plugin_idx):
                err = TtrpcError(2, f"invalid plugin index {request.plugin_idx!r}")
                if not registered.done():
                    registered.set_exception(err)
                raise err
            if not registered.done():
                registered.set_result((request.plugin_name, request.plugin_idx))
            return api_pb2.Empty().SerializeToString()

        holder: list[PluginConn] = []

        async def update_containers(payload: bytes) -> bytes:
            request = api_pb2.UpdateContainersRequest()
            request.ParseFromString(payload)
            name = holder[0].key if holder else "?"
            failed = await self._apply_unsolicited(name, request.update)
            return api_pb2.UpdateContainersResponse(failed=failed).SerializeToString()

        client = Channel(mux, PLUGIN_SERVICE_CONN)
        Channel(
            mux,
            RUNTIME_SERVICE_CONN,
            {
                RUNTIME_SERVICE: {
                    "RegisterPlugin": register,
                    "UpdateContainers": update_containers,
                }
            },
        )
        reader_task = asyncio.ensure_future(mux.run())
        try:
            name, index = await within(registered, self.profile.registration_timeout)
        except (TimeoutError, TtrpcError) as exc:
            self.rejections.append(f"registration: {exc or 'timed out'}")
            mux.close(ConnectionAbortedError("plugin registration failed"))
            await asyncio.gather(reader_task, return_exceptions=True)
            return
        plugin = PluginConn(name, index, mux, client)
        holder.append(plugin)
        try:
            await self._configure(plugin)
            async with self._lock:
                await self._synchronize(plugin)
                plugin.admitted = True
                self.plugins.append(plugin)
                self.plugins.sort(key=lambda p: p.index)
            await self._notify()
            log.info(2, "plugin admitted", plugin=plugin.key)
        except (TtrpcError, DracpuError) as exc:
            self.rejections.append(f"{plugin.key}: {exc}")
            log.warning("plugin rejected", plugin=plugin.key, error=str(exc))
            mux.close(ConnectionAbortedError(str(exc)))
        await asyncio.gather(reader_task, return_exceptions=True)
        if plugin in self.plugins:
            self.plugins.remove(plugin)
        plugin.closed.set()
        await self._notify()

    async def _configure(self, plugin: PluginConn) -> None:
        request = api_pb2.ConfigureRequest(
            runtime_name=self.profile.name,
            runtime_version=self.profile.version,
            registration_timeout=int(self.profile.registration_timeout * 1000),
            request_timeout=int(self.profile.request_timeout * 1000),
            NRI_version=self.profile.nri_version,
        )
        reply = api_pb2.ConfigureResponse()
        reply.ParseFromString(await self._call(plugin, "Configure", request))
        valid = VALID_MASK_FROM_V0_10 if self.profile.events_v0_10 else VALID_MASK_BEFORE_V0_10
        events = reply.events or valid
        if events & ~valid:
            raise DracpuError(f"invalid plugin events: {events & ~valid:#x}")
        plugin.events = events

    async def _synchronize(self, plugin: PluginConn) -> None:
        started = time.perf_counter()
        pods = list(self.pods.values())
        ctrs = list(self.containers.values())
        chunk = self.profile.sync_chunk or max(len(ctrs), 1)
        reply = api_pb2.SynchronizeResponse()
        start = 0
        while True:
            part = ctrs[start : start + chunk]
            more = start + chunk < len(ctrs)
            request = api_pb2.SynchronizeRequest(
                pods=pods if start == 0 else [], containers=part, more=more
            )
            reply = api_pb2.SynchronizeResponse()
            reply.ParseFromString(await self._call(plugin, "Synchronize", request))
            if not more:
                break
            if reply.update or not reply.more:
                raise DracpuError("plugin does not handle split sync requests")
            start += chunk
        failed = self._apply_updates(reply.update, creating="")
        self.sync_seconds.append(time.perf_counter() - started)
        if failed:
            # As the runtimes do: a Synchronize whose updates fail drops the plugin.
            raise DracpuError(f"NRI update of containers failed: {','.join(failed)}")

    async def _call(self, plugin: PluginConn, method: str, request: object) -> bytes:
        payload = request.SerializeToString()  # type: ignore[attr-defined]
        try:
            return await plugin.client.call(
                PLUGIN_SERVICE, method, payload, self.profile.request_timeout
            )
        except TtrpcError as exc:
            if not exc.remote:  # timed out or gone: the runtime drops the plugin
                plugin.mux.close(ConnectionAbortedError(f"{method}: {exc}"))
            raise

    # -- waiting ------------------------------------------------------------------------------

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def wait_plugin(self, name: str = DRIVER_NAME, timeout: float = 10.0) -> PluginConn:
        """Until a plugin of that name is registered, configured and synchronized."""

        def find() -> PluginConn | None:
            return next((p for p in self.plugins if p.name == name and p.admitted), None)

        async with self._changed:
            await within(self._changed.wait_for(lambda: find() is not None), timeout)
        found = find()
        assert found is not None
        return found

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 10.0) -> None:
        """Until `predicate()` holds; re-checked whenever plugins or cpusets change."""
        async with self._changed:
            await within(self._changed.wait_for(predicate), timeout)

    # -- pods and containers ------------------------------------------------------------------

    def add_pod(self, name: str, namespace: str = "default", uid: str = "") -> str:
        pod_id = f"pod{next(self._ids):04d}"
        self.pods[pod_id] = api_pb2.PodSandbox(
            id=pod_id, name=name, namespace=namespace, uid=uid or str(uuid.uuid4())
        )
        return pod_id

    def cpus(self, container_id: str) -> str:
        return self.containers[container_id].linux.resources.cpu.cpus

    def mems(self, container_id: str) -> str:
        """The container's memory nodes ("" = every node: no plugin set them)."""
        return self.containers[container_id].linux.resources.cpu.mems

    def hugepage_limits(self, container_id: str) -> dict[str, int]:
        """The container's hugetlb limits, page size (2MB) -> bytes ({} = none set)."""
        limits = self.containers[container_id].linux.resources.hugepage_limits
        return {limit.page_size: limit.limit for limit in limits}

    def cpusets(self) -> dict[str, str]:
        return {cid: self.cpus(cid) for cid in self.containers}

    async def create_container(
        self,
        pod_id: str,
        name: str,
        env: Sequence[str] = (),
        container_id: str = "",
        cdi_devices: Sequence[str] = (),
    ) -> str:
        """Create and start a container; CreateContainerError if a plugin refuses it.
        `cdi_devices`: the CDI devices the kubelet asked for, as NRI v0.10+ reports them."""
        ctr = self._new_container(pod_id, name, env, container_id, cdi_devices)
        async with self._lock:
            updates = await self._create_round(ctr)
            ctr.state = api_pb2.CONTAINER_RUNNING
            self.containers[ctr.id] = ctr
            self._apply_updates(updates, creating=ctr.id)
        return str(ctr.id)

    async def begin_create(
        self, pod_id: str, name: str, env: Sequence[str] = (), cdi_devices: Sequence[str] = ()
    ) -> InFlight:
        """The first half of a creation as CRI-O makes it: the CreateContainer round, to the
        plugins registered now, and then the container out of the runtime's list (its OCI
        create still running, so no Synchronize lists it) until `finish_create`."""
        ctr = self._new_container(pod_id, name, env, "", cdi_devices)
        async with self._lock:
            updates = await self._create_round(ctr)
        return InFlight(ctr, updates)

    async def finish_create(self, pending: InFlight) -> str:
        """The creation's end: the container listed, created (not started)."""
        async with self._lock:
            self.containers[pending.container.id] = pending.container
            self._apply_updates(pending.updates, creating=pending.container.id)
        await self._notify()
        return str(pending.container.id)

    async def start_container(self, container_id: str) -> None:
        """Start a created container and tell the plugins (PostStartContainer)."""
        ctr = self.containers[container_id]
        async with self._lock:
            ctr.state = api_pb2.CONTAINER_RUNNING
            ctr.started_at = time.time_ns()
            for plugin in list(self.plugins):
                if not plugin.events & event_bit(api_pb2.POST_START_CONTAINER):
                    continue
                request = api_pb2.PodContainerRequest(
                    pod=self.pods[ctr.pod_sandbox_id], container=ctr
                )
                with contextlib.suppress(TtrpcError):  # the runtime ignores post-start errors
                    await self._call(plugin, "PostStartContainer", request)

    def _new_container(
        self,
        pod_id: str,
        name: str,
        env: Sequence[str],
        container_id: str,
        cdi_devices: Sequence[str],
    ) -> api_pb2.Container:
        return api_pb2.Container(
            id=container_id or f"ctr{next(self._ids):05d}",
            pod_sandbox_id=pod_id,
            name=name,
            env=list(env),
            state=api_pb2.CONTAINER_CREATED,
            CDI_devices=[api_pb2.CDIDevice(name=d) for d in cdi_devices],
            created_at=time.time_ns(),
        )

    async def _create_round(self, ctr: api_pb2.Container) -> list[api_pb2.ContainerUpdate]:
        """CreateContainer to every subscribed plugin, under the lock: the adjustments applied
        to `ctr`, the other containers' updates returned."""
        pod = self.pods[ctr.pod_sandbox_id]
        owners: dict[str, str] = {}  # cpuset field -> the plugin that set it
        adjusted: dict[str, str] = {}
        hugepages: list[api_pb2.HugepageLimit] = []
        updates: list[api_pb2.ContainerUpdate] = []
        for plugin in list(self.plugins):
            if not plugin.events & event_bit(api_pb2.CREATE_CONTAINER):
                continue
            request = api_pb2.CreateContainerRequest(pod=pod, container=ctr)
            try:
                raw = await self._call(plugin, "CreateContainer", request)
            except TtrpcError as exc:
                if not exc.remote:
                    continue  # plugin dropped; creation goes on without it (as upstream)
                raise CreateContainerError(
                    f"plugin {plugin.key} refused container {ctr.name}: {exc.message}"
                ) from None
            reply = api_pb2.CreateContainerResponse()
            reply.ParseFromString(raw)
            cpu = reply.adjust.linux.resources.cpu
            for field_name, value in (("cpus", cpu.cpus), ("mems", cpu.mems)):
                if not value:
                    continue
                if field_name in owners:
                    raise CreateContainerError(
                        f'plugins "{owners[field_name]}" and "{plugin.key}" both tried to '
                        f"set cpuset.{field_name}"
                    )
                owners[field_name], adjusted[field_name] = plugin.key, value
            hugepages.extend(reply.adjust.linux.resources.hugepage_limits)
            _adjust_env(ctr, reply.adjust.env)
            for update in reply.update:
                if update.container_id == ctr.id:
                    raise CreateContainerError(
                        f"plugin {plugin.key} asked update of {ctr.id} during creation"
                    )
            updates.extend(reply.update)
        if "cpus" in adjusted:
            ctr.linux.resources.cpu.cpus = adjusted["cpus"]
        if "mems" in adjusted:
            ctr.linux.resources.cpu.mems = adjusted["mems"]
        ctr.linux.resources.hugepage_limits.extend(hugepages)
        return updates

    async def update_container(self, container_id: str, cpus: str = "", mems: str = "") -> None:
        """Another party's update of a running container's cpuset (the kubelet's CRI
        UpdateContainerResources; "" leaves a field as it is), as the adaptation relays it:
        UpdateContainer to every subscribed plugin with the resources asked for; a plugin's
        update of this container replaces what was asked, its updates of others are applied as
        its unsolicited ones are. A plugin's refusal fails the update (UpdateContainerError),
        and nothing changes."""
        ctr = self.containers[container_id]
        asked = api_pb2.LinuxResources()
        asked.cpu.cpus, asked.cpu.mems = cpus, mems
        result = api_pb2.LinuxResources()
        result.CopyFrom(asked)
        async with self._lock:
            others: list[api_pb2.ContainerUpdate] = []
            for plugin in list(self.plugins):
                if not plugin.events & event_bit(api_pb2.UPDATE_CONTAINER):
                    continue
                request = api_pb2.UpdateContainerRequest(
                    pod=self.pods[ctr.pod_sandbox_id], container=ctr, linux_resources=asked
                )
                try:
                    raw = await self._call(plugin, "UpdateContainer", request)
                except TtrpcError as exc:
                    if not exc.remote:
                        continue  # plugin dropped; the update goes on without it
                    raise UpdateContainerError(
                        f"plugin {plugin.key} refused the update of {ctr.id}: {exc.message}"
                    ) from None
                reply = api_pb2.UpdateContainerResponse()
                reply.ParseFromString(raw)
                for update in reply.update:
                    if update.container_id != ctr.id:
                        others.append(update)
                        continue
                    cpu = update.linux.resources.cpu
                    result.cpu.cpus = cpu.cpus or result.cpu.cpus
                    result.cpu.mems = cpu.mems or result.cpu.mems
            self._apply_updates(others, creating="")
            if result.cpu.cpus:
                ctr.linux.resources.cpu.cpus = result.cpu.cpus
            if result.cpu.mems:
                ctr.linux.resources.cpu.mems = result.cpu.mems
        await self._notify()

    async def stop_container(self, container_id: str) -> None:
        ctr = self.containers[container_id]
        async with self._lock:
            for plugin in list(self.plugins):
                if not plugin.events & event_bit(api_pb2.STOP_CONTAINER):
                    continue
                request = api_pb2.StopContainerRequest(
                    pod=self.pods[ctr.pod_sandbox_id], container=ctr
                )
                reply = api_pb2.StopContainerResponse()
                with contextlib.suppress(TtrpcError):
                    reply.ParseFromString(await self._call(plugin, "StopContainer", request))
                    self._apply_updates(reply.update, creating="")
            ctr.state = api_pb2.CONTAINER_STOPPED

    async def remove_container(self, container_id: str) -> None:
        ctr = self.containers[container_id]
        pod = self.pods[ctr.pod_sandbox_id]
        async with self._lock:
            for plugin in list(self.plugins):
                if not plugin.events & event_bit(api_pb2.REMOVE_CONTAINER):
                    continue
                with contextlib.suppress(TtrpcError):
                    await self._remove_one(plugin, pod, ctr)
            del self.containers[container_id]

    async def _remove_one(
        self, plugin: PluginConn, pod: api_pb2.PodSandbox, ctr: api_pb2.Container
    ) -> None:
        if self.profile.dedicated_remove:
            request = api_pb2.RemoveContainerRequest(pod=pod, container=ctr)
            try:
                await self._call(plugin, "RemoveContainer", request)
                return
            except TtrpcError as exc:
                if exc.code != UNIMPLEMENTED:
                    raise
        event = api_pb2.StateChangeEvent(event=api_pb2.REMOVE_CONTAINER, pod=pod, container=ctr)
        await self._call(plugin, "StateChange", event)

    # -- updates ------------------------------------------------------------------------------

    def _apply_updates(
        self, updates: Sequence[api_pb2.ContainerUpdate], creating: str
    ) -> list[str]:
        failed: list[str] = []
        for update in updates:
            ctr = self.containers.get(update.container_id)
            if ctr is None or ctr.state == api_pb2.CONTAINER_STOPPED or ctr.id in self.stopping:
                if not update.ignore_failure:
                    failed.append(update.container_id)
                continue
            cpus = update.linux.resources.cpu.cpus
            if cpus:  # "" means "leave unchanged"
                ctr.linux.resources.cpu.cpus = cpus
            mems = update.linux.resources.cpu.mems
            if mems:  # likewise
                ctr.linux.resources.cpu.mems = mems
        return failed

    async def _apply_unsolicited(
        self, plugin: str, updates: Sequence[api_pb2.ContainerUpdate]
    ) -> list[api_pb2.ContainerUpdate]:
        failed_ids = set(self._apply_updates(updates, creating=""))
        self.unsolicited.append(
            UnsolicitedBatch(
                plugin,
                [(u.container_id, u.linux.resources.cpu.cpus) for u in updates],
                sorted(failed_ids),
            )
        )
        await self._notify()
        return [u for u in updates if u.container_id in failed_ids]


def _adjust_env(ctr: api_pb2.Container, env: Sequence[api_pb2.KeyValue]) -> None:
    """A plugin's env adjustment, as the runtime's adaptation applies it: a variable already
    set is replaced in place, a new one added at the end."""
    for entry in env:
        prefix = f"{entry.key}="
        value = f"{prefix}{entry.value}"
        for index, existing in enumerate(ctr.env):
            if existing.startswith(prefix):
                ctr.env[index] = value
                break
        else:
            ctr.env.append(value)
