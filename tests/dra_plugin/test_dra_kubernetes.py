"""The Kubernetes API claim source through its httpx client, against a loopback API server,
and the whole dra-plugin process driven through it."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from harness.dra_plugin_node import NODE, NODE_UID, Node, claim, result
from harness.waits import eventually

from dracpu.core.errors import ConfigError, ConflictError, NotFoundError, UnavailableError
from dracpu.dev.apiserver import fake_apiserver
from dracpu.dev.kubelet_sim import Claim, KubeletSim
from dracpu.dra_plugin.cluster.apiserver import KubernetesAPI
from dracpu.dra_plugin.common.device_feed import DeviceFeed
from dracpu.dra_plugin.publishing.publisher import SlicePublisher
from dracpu.pb.allocator.v1 import allocator_pb2 as pb

pytestmark = pytest.mark.timeout(120)


async def test_claims_nodes_and_slices_through_the_client(tmp_path: Path) -> None:
    with fake_apiserver(tmp_path) as (store, kubeconfig):
        api = KubernetesAPI(str(kubeconfig))
        store.claims[("ns", "c1")] = claim("c1", "u1", [result("cpudevnuma000", cpus=1)])
        got = await api.get_claim("ns", "c1")
        assert got["metadata"]["uid"] == "u1"
        with pytest.raises(NotFoundError, match="retrieve claim ns/missing: 404"):
            await api.get_claim("ns", "missing")
        assert await api.node_uid(NODE) is None
        store.nodes[NODE] = {"apiVersion": "v1", "kind": "Node",
                             "metadata": {"name": NODE, "uid": NODE_UID}}  # fmt: skip

        devices = pb.DeviceList(generation=1, driver="dra.cpu")
        for i in range(130):
            devices.devices.add(name=f"cpudev{i:03d}")
        publisher = SlicePublisher(
            driver="dra.cpu",
            node=NODE,
            cluster=api,
            feed=DeviceFeed(None),  # type: ignore[arg-type]  # sync() alone asks nothing
        )
        await publisher.sync(devices)
        slices = sorted(store.slices.values(), key=lambda s: s["metadata"]["name"])
        assert [len(s["spec"]["devices"]) for s in slices] == [128, 2]
        assert slices[0]["metadata"]["ownerReferences"][0]["uid"] == NODE_UID
        assert ("GET", f"/apis/resource.k8s.io/v1/resourceslices?fieldSelector="
                f"spec.driver%3Ddra.cpu%2Cspec.nodeName%3D{NODE}") in store.requests  # fmt: skip

        # A stale resourceVersion is a conflict; the next sync re-reads and converges.
        stale = dict(slices[0], metadata=dict(slices[0]["metadata"], resourceVersion="0"))
        with pytest.raises(ConflictError):
            await api.update_slice(stale)
        with pytest.raises(ConflictError):
            await api.delete_slice(slices[0]["metadata"]["name"], "other-uid", "1")
        del devices.devices[100:]
        await publisher.sync(devices)
        assert sorted(len(s["spec"]["devices"]) for s in store.slices.values()) == [100]
        await api.delete_slice("gone", "x", "1")  # already gone is fine


async def test_unreachable_api_server_is_unavailable(tmp_path: Path) -> None:
    with fake_apiserver(tmp_path) as (_, kubeconfig):
        api = KubernetesAPI(str(kubeconfig))
    # The server is gone now: connection refused.
    with pytest.raises(UnavailableError, match="retrieve claim ns/c1"):
        await api.get_claim("ns", "c1")
    with pytest.raises(UnavailableError, match="list resourceslices"):
        await api.list_slices("dra.cpu", NODE)


def test_unusable_kubeconfig_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot load kubeconfig"):
        KubernetesAPI(str(tmp_path / "absent"))


async def test_plugin_process_against_the_api_server(node: Node) -> None:
    with fake_apiserver(node.root) as (store, kubeconfig):
        store.nodes[NODE] = {"apiVersion": "v1", "kind": "Node",
                             "metadata": {"name": NODE, "uid": NODE_UID}}  # fmt: skip
        await node.start_topology()
        await node.start_allocator()
        node.use_apiserver(kubeconfig)
        node._spawn("plugin", node.plugin_argv())
        await node.wait_serving("plugin", node.sock("plugin"))

        async def published() -> bool:
            with store.lock:
                return any(s["spec"]["driver"] == "dra.cpu" for s in store.slices.values())

        await eventually(published, "slices in the API server")
        plugin = await KubeletSim(node.kubelet_root).register("dra.cpu", timeout=15)
        u = str(uuid.uuid4())
        store.claims[("default", "api")] = claim("api", u, [result("cpudevnuma001", cpus=2)])
        answer = await plugin.prepare([Claim("default", "api", u), Claim("default", "nope", "x")])
        assert answer[u].error == ""
        assert "retrieve claim default/nope" in answer["x"].error
        assert await plugin.unprepare([Claim("default", "api", u)]) == {u: ""}
        await plugin.close()
