"""What each prepared claim got, in its ResourceClaim's status.devices.

The entries as built from the allocator's answer; the writer against the loopback API server
(server-side apply of the status subresource, list-map entries owned per field manager):
written after prepare, removed on unprepare, other writers' entries kept, failures retried in
the background without delaying the prepare, a claim replaced under the same name left alone,
and a server without the field detected once. Then the whole dra-plugin process against that
server, in the test's process and as its own process beside another driver's entries.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from harness.dra_plugin_node import NODE, NODE_UID, Node, claim, result
from harness.waits import eventually
from prometheus_client import CollectorRegistry

from dracpu.core import __version__
from dracpu.core.clients.allocator import AllocatorClient
from dracpu.dev.apiserver import Store, fake_apiserver
from dracpu.dev.kubelet_sim import Claim, KubeletSim
from dracpu.dra_plugin.cluster.api_features import CLAIM_DEVICE_STATUS, FeatureSupport
from dracpu.dra_plugin.cluster.apiserver import KubernetesAPI
from dracpu.dra_plugin.cluster.claim_status import MAX_DATA, failed_entries, prepared_entries
from dracpu.dra_plugin.cluster.status_writer import ClaimStatusWriter, field_manager
from dracpu.dra_plugin.common.plugin_metrics import PluginMetrics
from dracpu.dra_plugin.common.resource_claim import ClaimRef, ResourceClaim, parse_claim
from dracpu.dra_plugin.kubelet.metadata import MetadataWriter
from dracpu.dra_plugin.kubelet.node_service import NodeService
from dracpu.pb.allocator.v1 import allocator_pb2 as pb

pytestmark = pytest.mark.timeout(120)
MANAGER = field_manager("dra.cpu", NODE)
TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")


def response(*devices: tuple[str, str, str], policy: str = "packed") -> pb.PrepareResponse:
    """(request, device, cpus) per prepared device, on a 2-socket machine's NUMA node 0."""
    answer = pb.PrepareResponse(claim=pb.Claim(policy=policy))
    for request, device, cpus in devices:
        answer.devices.add(
            request_names=[request], pool_name=NODE, device_name=device, cpus=cpus,
            numa_nodes=[0], sockets=[0], l3_caches=[0], whole_cores=True, policy=policy,
            topology_known=True,
        )  # fmt: skip
    return answer


def read_claim(obj: dict[str, Any]) -> ResourceClaim:
    return parse_claim(obj, "dra.cpu")


def entries_prepared(
    obj: dict[str, Any], answer: pb.PrepareResponse, shares: dict[tuple[str, str, str], str]
) -> list[dict[str, Any]]:
    """The status.devices entries written for a prepared claim, as sent to the API server."""
    claim = parse_claim(obj, "dra.cpu")
    return [e.to_json() for e in prepared_entries("dra.cpu", claim, answer, shares)]


def entries_failed(obj: dict[str, Any], error: str) -> list[dict[str, Any]]:
    return [e.to_json() for e in failed_entries("dra.cpu", read_claim(obj), error)]


def test_a_prepared_device_says_which_cpus_it_got_and_where_they_lie() -> None:
    obj = claim("c", "u1", [result("cpudevnuma000", cpus=2, shareID="s-1")])
    obj["metadata"]["generation"] = 3
    shares = {("cpus", NODE, "cpudevnuma000"): "s-1"}
    (entry,) = entries_prepared(obj, response(("cpus", "cpudevnuma000", "2-3")), shares)
    (condition,) = entry.pop("conditions")
    assert entry == {
        "driver": "dra.cpu", "pool": NODE, "device": "cpudevnuma000", "shareID": "s-1",
        "data": {"cpuset": "2-3", "numaNodes": [0], "sockets": [0], "l3Caches": [0],
                 "wholeCores": True, "policy": "packed", "driverVersion": __version__},
    }  # fmt: skip
    assert condition.pop("lastTransitionTime") and condition == {
        "type": "Ready", "status": "True", "reason": "Prepared",
        "message": "CPUs 2-3 pinned", "observedGeneration": 3,
    }  # fmt: skip


def test_an_older_allocator_without_topology_gives_the_cpuset_and_policy_only() -> None:
    answer = pb.PrepareResponse(claim=pb.Claim(policy="spread"))
    answer.devices.add(request_names=["cpus"], pool_name=NODE, device_name="cpudev004", cpus="4")
    (entry,) = entries_prepared(claim("c", "u", []), answer, {})
    assert entry["data"] == {"cpuset": "4", "policy": "spread", "driverVersion": __version__}
    assert "shareID" not in entry


def test_a_repeated_prepare_keeps_the_conditions_transition_time() -> None:
    obj = claim("c", "u1", [result("cpudevnuma000", cpus=2)])
    obj["status"]["devices"] = [{
        "driver": "dra.cpu", "pool": NODE, "device": "cpudevnuma000",
        "conditions": [{"type": "Ready", "status": "True", "reason": "Prepared", "message": "",
                        "lastTransitionTime": "2020-01-02T03:04:05Z"}],
    }]  # fmt: skip
    (entry,) = entries_prepared(obj, response(("cpus", "cpudevnuma000", "2-3")), {})
    assert entry["conditions"][0]["lastTransitionTime"] == "2020-01-02T03:04:05Z"
    (failed,) = entries_failed(obj, "no CPUs left")
    assert TIME.fullmatch(failed["conditions"][0]["lastTransitionTime"])
    assert failed["conditions"][0]["lastTransitionTime"] != "2020-01-02T03:04:05Z"


def test_a_failed_prepare_says_why_for_each_of_our_devices_only() -> None:
    obj = claim("c", "u1", [result("cpudevnuma000", cpus=2), result("gpu0", driver="gpu.x")])
    (entry,) = entries_failed(obj, "claim default/c: opaque config: unknown field")
    assert entry["device"] == "cpudevnuma000" and entry["data"] == {"driverVersion": __version__}
    (condition,) = entry["conditions"]
    assert (condition["status"], condition["reason"]) == ("False", "PrepareFailed")
    assert condition["message"] == "claim default/c: opaque config: unknown field"


def test_a_claim_with_placed_memory_names_its_memory_nodes() -> None:
    answer = response(("cpus", "cpudevnuma000", "2-3"))
    answer.claim.memory_nodes = "0-1"
    (entry,) = entries_prepared(claim("c", "u", []), answer, {})
    assert entry["data"]["memoryNodes"] == [0, 1]
    (plain,) = entries_prepared(claim("c", "u", []),
                                response(("cpus", "cpudevnuma000", "2-3")), {})  # fmt: skip
    assert "memoryNodes" not in plain["data"]  # not placed: every node


def test_a_claim_holding_memory_lists_it_per_node_and_kind_on_every_entry() -> None:
    answer = response(("cpus", "cpudevnuma000", "2-3"), ("more", "cpudevnuma001", "12-13"))
    answer.claim.memory_nodes = "1"
    answer.claim.memory.add(numa_node=1, kind="hugepages-2Mi", bytes=64 << 20)
    answer.claim.memory.add(numa_node=1, kind="memory", bytes=1 << 30)
    entries = entries_prepared(claim("c", "u", []), answer, {})
    assert len(entries) == 2
    for entry in entries:
        assert entry["data"]["memory"] == [
            {"numaNode": 1, "kind": "hugepages-2Mi", "bytes": 67108864},
            {"numaNode": 1, "kind": "memory", "bytes": 1073741824},
        ]
        assert entry["data"]["memoryNodes"] == [1]
    (plain,) = entries_prepared(claim("c", "u", []),
                                response(("cpus", "cpudevnuma000", "2-3")), {})  # fmt: skip
    assert "memory" not in plain["data"]  # holds no memory device: nothing said


def test_data_never_exceeds_the_apis_limit() -> None:
    scattered = ",".join(str(cpu) for cpu in range(0, 8192, 2))
    (entry,) = entries_prepared(claim("c", "u", []),
                                response(("cpus", "cpudevmachine", scattered)), {})  # fmt: skip
    assert entry["data"] == {"cpuCount": 4096, "truncated": True, "driverVersion": __version__}
    assert len(yaml.safe_dump(entry["data"])) < MAX_DATA


def writer_for(api: KubernetesAPI, features: FeatureSupport | None = None) -> ClaimStatusWriter:
    return ClaimStatusWriter(
        api, driver="dra.cpu", node=NODE, features=features or FeatureSupport(),
        metrics=PluginMetrics(), max_backoff=0.2,
    )  # fmt: skip


def stored_devices(store: Store, name: str) -> list[dict[str, Any]]:
    with store.lock:
        return list(store.claims[("default", name)]["status"].get("devices") or [])


async def test_written_merged_with_other_writers_and_removed(tmp_path: Path) -> None:
    with fake_apiserver(tmp_path) as (store, kubeconfig):
        obj = claim("c", "u1", [result("cpudevnuma000", cpus=2), result("nic0", driver="net.x")])
        store.claims[("default", "c")] = obj
        theirs = [{"driver": "net.x", "pool": NODE, "device": "nic0"}]
        with store.lock:  # another driver's entry, applied under its own manager
            store.apply_status(("default", "c"), "net.x/node-a", theirs, True)
        writer = writer_for(KubernetesAPI(str(kubeconfig)))
        task = asyncio.create_task(writer.run())
        ref = ClaimRef("default", "c", "u1")
        writer.prepared(ref, read_claim(obj), response(("cpus", "cpudevnuma000", "2-3")), {})
        await asyncio.wait_for(writer.idle(), 10)
        assert sorted(d["driver"] for d in stored_devices(store, "c")) == ["dra.cpu", "net.x"]
        ours = next(d for d in stored_devices(store, "c") if d["driver"] == "dra.cpu")
        assert ours["data"]["cpuset"] == "2-3"
        path = next(p for m, p in store.requests if m == "PATCH")
        assert path == ("/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/c/status"
                        "?fieldManager=dra.cpu%2Fnode-a&force=true")  # fmt: skip

        writer.removed(ref)
        await asyncio.wait_for(writer.idle(), 10)
        assert [d["driver"] for d in stored_devices(store, "c")] == ["net.x"]
        assert writer.state.written == 2
        task.cancel()


async def test_failures_are_retried_in_the_background_and_never_delay_a_prepare(
    tmp_path: Path,
) -> None:
    with fake_apiserver(tmp_path) as (store, kubeconfig):
        obj = claim("c", "u1", [result("cpudevnuma000", cpus=2)])
        store.claims[("default", "c")] = obj
        store.fail_status = 3
        writer = writer_for(KubernetesAPI(str(kubeconfig)))
        task = asyncio.create_task(writer.run())
        writer.prepared(ClaimRef("default", "c", "u1"), read_claim(obj),
                        response(("cpus", "cpudevnuma000", "2-3")), {})  # fmt: skip
        assert writer.state.pending  # recorded and returned: nothing waited for the server
        await asyncio.wait_for(writer.idle(), 20)
        assert stored_devices(store, "c")[0]["data"]["cpuset"] == "2-3"
        assert "500 Internal Server Error: etcdserver: request timed out" in writer.state.last_error
        exposition = writer.metrics.exposition()
        assert 'dra_cpu_claim_status_writes_total{result="retry"} 3' in exposition
        assert 'dra_cpu_claim_status_writes_total{result="success"} 1' in exposition
        task.cancel()


@pytest.mark.parametrize("invalid", [False, True], ids=["precondition", "immutable"])
async def test_a_claim_replaced_under_the_same_name_is_not_written(
    tmp_path: Path, invalid: bool
) -> None:
    with fake_apiserver(tmp_path) as (store, kubeconfig):
        store.uid_as_invalid = invalid
        old = claim("c", "u-old", [result("cpudevnuma000", cpus=2)])
        store.claims[("default", "c")] = claim("c", "u-new", [result("cpudevnuma000", cpus=2)])
        writer = writer_for(KubernetesAPI(str(kubeconfig)))
        task = asyncio.create_task(writer.run())
        writer.prepared(ClaimRef("default", "c", "u-old"), read_claim(old),
                        response(("cpus", "cpudevnuma000", "2-3")), {})  # fmt: skip
        await asyncio.wait_for(writer.idle(), 10)
        assert stored_devices(store, "c") == []
        assert 'result="gone"} 1' in writer.metrics.exposition()
        task.cancel()


@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        ("unknown", "field not declared in schema"),
        ("dropped", "dropped status.devices from the stored ResourceClaim (is its "
                    "DRAResourceClaimDeviceStatus feature gate off?)"),
    ],
)  # fmt: skip
async def test_a_server_without_the_field_is_detected_once(
    tmp_path: Path, mode: str, reason: str
) -> None:
    with fake_apiserver(tmp_path) as (store, kubeconfig):
        store.device_status = mode
        for name in ("a", "b"):
            store.claims[("default", name)] = claim(name, name, [result("cpudevnuma000")])
        features = FeatureSupport()
        writer = writer_for(KubernetesAPI(str(kubeconfig)), features)
        task = asyncio.create_task(writer.run())
        for name in ("a", "b"):
            stored = read_claim(store.claims[("default", name)])
            writer.prepared(ClaimRef("default", name, name), stored,
                            response(("cpus", "cpudevnuma000", "2")), {})  # fmt: skip
        await asyncio.wait_for(writer.idle(), 10)
        (missing,) = features.missing.values()
        assert (missing.name, missing.gate) == (CLAIM_DEVICE_STATUS.name, CLAIM_DEVICE_STATUS.gate)
        assert reason in missing.reason
        patches = sum(1 for method, _ in store.requests if method == "PATCH")
        writer.prepared(ClaimRef("default", "a", "a"), read_claim(store.claims[("default", "a")]),
                        response(("cpus", "cpudevnuma000", "2")), {})  # fmt: skip
        writer.removed(ClaimRef("default", "a", "a"))
        assert not writer.state.pending
        assert sum(1 for method, _ in store.requests if method == "PATCH") == patches
        task.cancel()


def status_of(store: Store, name: str) -> dict[str, Any] | None:
    ours = [d for d in stored_devices(store, name) if d["driver"] == "dra.cpu"]
    return ours[0] if ours else None


async def test_the_plugin_process_writes_and_removes_the_status(node: Node) -> None:
    with fake_apiserver(node.root) as (store, kubeconfig):
        store.nodes[NODE] = {"apiVersion": "v1", "kind": "Node",
                             "metadata": {"name": NODE, "uid": NODE_UID}}  # fmt: skip
        await node.start_topology()
        await node.start_allocator()
        node.use_apiserver(kubeconfig)
        node._spawn("plugin", node.plugin_argv())
        await node.wait_serving("plugin", node.sock("plugin"))
        plugin = await KubeletSim(node.kubelet_root).register("dra.cpu", timeout=15)
        u = str(uuid.uuid4())
        store.claims[("default", "st")] = claim("st", u, [result("cpudevnuma001", cpus=2)])
        answer = await plugin.prepare([Claim("default", "st", u)])
        assert answer[u].error == ""
        spec = next((node.cdi).glob(f"*claim-{u}.json")).read_text()
        pinned = re.search(rf"DRA_CPUSET_{u}=([0-9,-]+)", spec)
        assert pinned is not None

        async def written() -> dict[str, Any] | None:
            return status_of(store, "st")

        entry = await eventually(written, "the claim's status.devices entry")
        assert entry["data"]["cpuset"] == pinned.group(1)
        assert entry["data"]["numaNodes"] == [1] and entry["data"]["wholeCores"] is True
        assert entry["conditions"][0]["status"] == "True"

        assert await plugin.unprepare([Claim("default", "st", u)]) == {u: ""}

        async def removed() -> bool:
            return status_of(store, "st") is None

        await eventually(removed, "the entry removed")

        # A prepare that fails says why in the claim.
        bad = str(uuid.uuid4())
        parameters = {"apiVersion": "v1alpha1", "cpuConfig": {"bogus": 1}}
        config = [{"source": "FromClaim", "requests": [],
                   "opaque": {"driver": "dra.cpu", "parameters": parameters}}]  # fmt: skip
        store.claims[("default", "bad")] = claim(
            "bad", bad, [result("cpudevnuma000", cpus=1)], config=config
        )
        answer = await plugin.prepare([Claim("default", "bad", bad)])
        assert "unknown field" in answer[bad].error

        async def failed() -> dict[str, Any] | None:
            return status_of(store, "bad")

        entry = await eventually(failed, "the failure in the claim")
        assert entry["conditions"][0]["status"] == "False"
        assert entry["conditions"][0]["message"] == answer[bad].error
        await plugin.close()


async def test_a_write_left_undone_at_a_restart_is_caught_up(node: Node) -> None:
    with fake_apiserver(node.root) as (store, kubeconfig):
        store.nodes[NODE] = {"apiVersion": "v1", "kind": "Node",
                             "metadata": {"name": NODE, "uid": NODE_UID}}  # fmt: skip
        await node.start_topology()
        await node.start_allocator()
        node.use_apiserver(kubeconfig)
        argv = node.plugin_argv()
        node._spawn("plugin", argv)
        await node.wait_serving("plugin", node.sock("plugin"))
        store.fail_status = 10**6  # every status write fails while this plugin runs
        plugin = await KubeletSim(node.kubelet_root).register("dra.cpu", timeout=15)
        u = str(uuid.uuid4())
        store.claims[("default", "late")] = claim("late", u, [result("cpudevnuma000", cpus=2)])
        assert (await plugin.prepare([Claim("default", "late", u)]))[u].error == ""
        await plugin.close()
        node.stop("plugin")
        assert "claim device status left unwritten at shutdown" in node.log("plugin").read_text()
        assert status_of(store, "late") is None

        store.fail_status = 0
        node._spawn("plugin", argv)  # the kubelet does not prepare a prepared claim again
        await node.wait_serving("plugin", node.sock("plugin"))

        async def caught_up() -> dict[str, Any] | None:
            return status_of(store, "late")

        entry = await eventually(caught_up, "the entry written after the restart")
        assert entry["conditions"][0]["status"] == "True" and entry["data"]["cpuset"]


async def test_the_plugin_process_keeps_other_drivers_entries(started: Node) -> None:
    u = str(uuid.uuid4())
    obj = claim("f", u, [result("cpudevnuma000", cpus=1), result("nic0", driver="net.x")])
    started.write_claim(obj)
    # The other driver applies its entry as its own field manager.
    theirs = {"driver": "net.x", "pool": NODE, "device": "nic0"}
    started.cluster.apply_claim_status("default", "f", "net.x", [theirs])
    plugin = await KubeletSim(started.kubelet_root).register("dra.cpu", timeout=15)
    assert (await plugin.prepare([Claim("default", "f", u)]))[u].error == ""

    async def drivers() -> list[str]:
        devices = started.read_claim("default", "f")["status"].get("devices") or []
        return sorted(d["driver"] for d in devices)

    async def both() -> bool:
        return await drivers() == ["dra.cpu", "net.x"]

    await eventually(both, "our entry beside the other driver's")
    assert await plugin.unprepare([Claim("default", "f", u)]) == {u: ""}

    async def only_theirs() -> bool:
        return await drivers() == ["net.x"]

    await eventually(only_theirs, "our entry removed, theirs kept")
    await plugin.close()


class HeldRead:
    """The API server's claim, whose next read waits while `gate` is clear."""

    def __init__(self, obj: dict[str, Any]) -> None:
        self.obj = obj
        self.gate = asyncio.Event()
        self.gate.set()
        self.waiting = False

    def describe(self) -> str:
        return "stand-in"

    async def get_claim(self, namespace: str, name: str) -> dict[str, Any]:
        self.waiting = not self.gate.is_set()
        await self.gate.wait()
        self.waiting = False
        return self.obj

    async def apply_claim_status(self, *args: Any) -> dict[str, Any]:
        return self.obj


async def test_a_claim_unprepared_while_the_status_is_caught_up_is_not_prepared_again(
    node: Node, tmp_path: Path
) -> None:
    """The catch-up at a start lists the allocator's claims, reads each from the API server and
    asks the allocator again for the ones whose status lacks our entries. The kubelet may
    unprepare one in between (its retries arrive as the plugin registers): it stays released,
    as nobody would ever unprepare it again and its CPUs would be lost to the node."""
    await node.start_topology()
    await node.start_allocator()
    allocator = AllocatorClient(str(node.sock("allocator")), deadline=20.0)
    u = str(uuid.uuid4())
    cluster = HeldRead(claim("gone", u, [result("cpudevnuma000", cpus=2)]))
    metrics = PluginMetrics(CollectorRegistry())
    status = ClaimStatusWriter(
        cluster, driver="dra.cpu", node=NODE, features=FeatureSupport(), metrics=metrics
    )
    service = NodeService(
        driver="dra.cpu", cluster=cluster, allocator=allocator,  # type: ignore[arg-type]
        metadata=MetadataWriter("dra.cpu", tmp_path / "metadata", tmp_path / "cdi"),
        metrics=metrics, status=status,
    )  # fmt: skip
    ref = ClaimRef("default", "gone", u)
    assert (await service.prepare([ref]))[u].error == ""
    assert [c.uid for c in (await allocator.list_claims()).claims] == [u]

    cluster.gate.clear()  # the catch-up's read of the claim waits
    catching_up = asyncio.create_task(service.catch_up(NODE))
    await eventually(lambda: cluster.waiting, "the catch-up reading the claim")
    assert await service.unprepare([ref]) == {u: ""}
    cluster.gate.set()

    assert await catching_up == 0
    assert (await allocator.list_claims()).claims == []
    await allocator.close()
