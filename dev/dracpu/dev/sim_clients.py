"""Clients of the running simulators' control sockets, as `dev claim` and `dev release` use them."""

from __future__ import annotations

import os

from dracpu.core.containers import Container
from dracpu.dev.sim_control import KUBELET_SERVICE, RUNTIME_SERVICE, ControlClient


class KubeletClient:
    def __init__(self, socket: str | os.PathLike[str]) -> None:
        self._control = ControlClient(socket, KUBELET_SERVICE, "kubelet simulator")

    async def prepare(self, namespace: str, name: str, uid: str) -> list[str]:
        """NodePrepareResources for one claim; the CDI device ids the kubelet would pass on."""
        reply = await self._control.request(
            "Prepare", {"namespace": namespace, "name": name, "uid": uid}
        )
        ids: list[str] = []
        for device in reply.get("devices", []):
            ids += [i for i in device.get("cdi_device_ids", []) if i not in ids]
        return ids

    async def unprepare(self, namespace: str, name: str, uid: str) -> None:
        await self._control.request("Unprepare", {"namespace": namespace, "name": name, "uid": uid})


class RuntimeClient:
    def __init__(self, socket: str | os.PathLike[str]) -> None:
        self._control = ControlClient(socket, RUNTIME_SERVICE, "runtime simulator")

    async def create_container(self, container: Container, env: list[str]) -> str:
        """Create (and start) a container; the cpuset the NRI plugin pinned it to."""
        reply = await self._control.request(
            "CreateContainer", {"container": container.fields(), "env": env}
        )
        return str(reply.get("cpus", ""))

    async def stop_container(self, container: Container) -> None:
        await self._control.request("StopContainer", {"container": container.fields()})

    async def remove_container(self, container: Container) -> None:
        await self._control.request("RemoveContainer", {"container": container.fields()})
