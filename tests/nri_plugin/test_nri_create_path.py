"""The path one CreateContainer takes through the nri-plugin's modules, measured.

The runtime's call for a claimed container (one claim's CPUs in its `DRA_CPUSET_<uid>` env, on
a plugin already configured and synchronized) goes through the ttrpc Plugin service's handler
in-process, after one call like it, to a CPUPlugin whose allocator is a stand-in giving the
answer the real one gives. Traced with sys.setprofile (`harness.module_path`, which says what an
entry and a return are); only the nri-plugin's own modules count: `dracpu.core.*` and the
generated `dracpu.pb.*` messages do not, nor the stand-in.

The path, in order: transport.plugin_service (the request parsed), the CPU plugin's handler
(cpu_plugin), events.container_events (the call timed against the runtime's
plugin_request_timeout, then placed), state.claim_env (the claims read from the env), the
allocator asked with what the runtime's timeout leaves (state.pacing), the answer turned into the
container's record and adjustment (state.conversions, with the container's name read where the
runtime keeps it: transport.container_names; state.registry), the pool after the attach noted
(state.shared_pool), and the shared containers the claim moved off the pool
(events.pool_pushes). A shared container takes the pool the plugin follows instead.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Final

import pytest
from harness.module_path import ModulePath, trace

from dracpu.core.cpuset import CPUSet
from dracpu.nri_plugin.cpu_plugin import CPUPlugin
from dracpu.nri_plugin.transport.plugin_service import PluginService
from dracpu.pb.allocator.v1 import allocator_pb2 as pb
from dracpu.pb.nri import api_pb2

UID: Final = "3f0a5e9c-1111-4222-8333-444455556666"
CPUS: Final = "2-3"
POOL: Final = pb.SharedPool(cpus="0-1,4-7", online="0-7", exclusive=CPUS, generation=2)
MAX_MODULES: Final = 10
MAX_RETURNS: Final = 3
PLUGIN: Final = "dracpu.nri_plugin."


class Allocator:
    """The allocator's answers: the claim's CPUs for its container, the pool after the attach."""

    async def attach(
        self,
        container: pb.ContainerRef,
        claims: Mapping[str, CPUSet],
        timeout: float | None = None,
    ) -> pb.AttachContainerResponse:
        assert claims == {UID: CPUSet.parse(CPUS)}
        return pb.AttachContainerResponse(cpus=CPUS, shared_pool=POOL, memory_nodes="0")

    async def detach(self, container_id: str) -> None:
        raise AssertionError("no container stops on this path")

    async def reconcile(self, live_container_ids: Sequence[str]) -> list[str]:
        return []

    async def adopt(
        self, container: pb.ContainerRef, claims: Mapping[str, CPUSet]
    ) -> pb.AdoptResponse:
        raise AssertionError("no container is adopted on this path")

    async def shared_pool(self) -> pb.SharedPool:
        return POOL

    async def watch_shared_pool(self) -> AsyncIterator[pb.SharedPool]:
        yield POOL


def creation(name: str, env: list[str]) -> bytes:
    pod = api_pb2.PodSandbox(id="sandbox-1", name="app", namespace="default", uid="pod-uid-1")
    ctr = api_pb2.Container(
        id=f"ctr-{name}", pod_sandbox_id=pod.id, name=name, state=api_pb2.CONTAINER_CREATED, env=env
    )
    return api_pb2.CreateContainerRequest(pod=pod, container=ctr).SerializeToString()


@pytest.fixture
async def service() -> PluginService:
    plugin = CPUPlugin(Allocator())  # type: ignore[arg-type]
    service = PluginService(
        plugin, configured=lambda info: None, synchronized=lambda: None, shutdown=lambda: None
    )
    configure = api_pb2.ConfigureRequest(
        runtime_name="containerd", runtime_version="2.4.2", request_timeout=2_000_000_000
    )
    await service.methods()["Configure"](configure.SerializeToString())
    await service.methods()["Synchronize"](api_pb2.SynchronizeRequest().SerializeToString())
    return service


async def created(
    service: PluginService, payload: bytes
) -> tuple[api_pb2.CreateContainerResponse, ModulePath]:
    answer, path = await trace(service.methods()["CreateContainer"](payload))
    return api_pb2.CreateContainerResponse.FromString(answer), path


async def test_a_claimed_container_crosses_few_modules_and_seldom_returns(
    service: PluginService,
) -> None:
    await service.methods()["CreateContainer"](creation("warm", [f"DRA_CPUSET_{UID}={CPUS}"]))
    response, path = await created(
        service, creation("db", ["PATH=/bin", f"DRA_CPUSET_{UID}={CPUS}"])
    )
    assert response.adjust.linux.resources.cpu.cpus == CPUS
    assert response.adjust.linux.resources.cpu.mems == "0"
    assert all(m.startswith(PLUGIN) for m in path.modules), path.describe()
    assert path.entered("dracpu.nri_plugin.events.container_events") >= 1, path.describe()
    assert len(path.modules) <= MAX_MODULES, path.describe()
    assert path.returns <= MAX_RETURNS, path.describe()


async def test_a_shared_container_takes_the_pool_the_plugin_follows(
    service: PluginService,
) -> None:
    await service.methods()["CreateContainer"](creation("warm", []))
    response, path = await created(service, creation("web", ["PATH=/bin"]))
    assert response.adjust.linux.resources.cpu.cpus == "0-1,4-7"
    assert "dracpu.nri_plugin.state.shared_pool" in path.modules, path.describe()
    assert len(path.modules) <= MAX_MODULES, path.describe()
    assert path.returns <= MAX_RETURNS, path.describe()
