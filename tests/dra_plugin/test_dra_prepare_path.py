"""The path one NodePrepareResources takes through the dra-plugin's modules, measured.

The kubelet's call for one typical claim (4 CPUs of a NUMA-node device, a configuration choosing
the spread strategy, reserved for one pod) goes through the v1 DRA servicer in-process, after
one call like it, to a NodeService whose cluster and allocator are stand-ins (the claim object
and the allocator's answer as the real ones give them), with the device metadata written to a
temporary directory and the claim status handed to its background writer. Traced with
sys.setprofile (`harness.module_path`, which says what an entry and a return are); only the
dra-plugin's own modules count: `dracpu.core.*` (the shared plumbing) and the generated
`dracpu.pb.*` messages do not, nor the stand-ins.

The path, in order: servicer (the call's budget from kubelet.call_budget), kubelet.node_service
(the claim's names checked and the claim parsed by common.resource_claim, its PrepareRequest
built by common.claim_request before the claim's lock, kubelet.keyed_lock), the allocator asked
with what the budget leaves, the status wish (cluster.status_writer, cluster.claim_status,
common.plugin_metrics), the kubelet's device list (common.claim_request), the device metadata
(kubelet.metadata) and the call's metrics.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.dra_plugin_node import NODE, claim, result
from harness.module_path import trace
from prometheus_client import CollectorRegistry

from dracpu.dra_plugin.cluster.api_features import FeatureSupport
from dracpu.dra_plugin.cluster.status_writer import ClaimStatusWriter
from dracpu.dra_plugin.common.plugin_metrics import PluginMetrics
from dracpu.dra_plugin.kubelet.metadata import MetadataWriter
from dracpu.dra_plugin.kubelet.node_service import NodeService
from dracpu.dra_plugin.servicer import DRAPluginV1
from dracpu.pb.allocator.v1 import allocator_pb2 as pb
from dracpu.pb.kubelet.dra.v1 import api_pb2 as v1

UID = "3f0a5e9c-1111-4222-8333-444455556666"
POD = "7c1d2e3f-0000-4000-8000-0000000000a1"
CPUS = "1-2,21-22"
MAX_MODULES = 20
MAX_RETURNS = 4
PLUGIN = "dracpu.dra_plugin."


def typical_claim() -> dict[str, Any]:
    parameters = {"apiVersion": "v1alpha1", "cpuConfig": {"strategy": "spread"}}
    config = {
        "source": "FromClaim",
        "requests": ["cpus"],
        "opaque": {"driver": "dra.cpu", "parameters": parameters},
    }
    obj = claim("typical", UID, [result("cpudevnuma000", cpus=4)], config=[config])
    obj["status"]["reservedFor"] = [{"resource": "pods", "name": "app", "uid": POD}]
    return obj


class Cluster:
    """The API server's claim, as it stores it."""

    def __init__(self, obj: dict[str, Any]) -> None:
        self.obj = obj

    def describe(self) -> str:
        return "stand-in"

    async def get_claim(self, namespace: str, name: str) -> dict[str, Any]:
        return self.obj

    async def apply_claim_status(self, *args: Any) -> dict[str, Any]:
        return self.obj


class Allocator:
    """The allocator's answer for the claim: its CPUs on NUMA node 0, the spread policy."""

    async def prepare(
        self, request: pb.PrepareRequest, deadline: float | None = None
    ) -> pb.PrepareResponse:
        answer = pb.PrepareResponse(claim=pb.Claim(uid=UID, cpus=CPUS, policy="spread"))
        answer.devices.add(
            request_names=["cpus"], pool_name=NODE, device_name="cpudevnuma000", cpus=CPUS,
            cdi_device_ids=[f"dra.k8s.io/cpu=claim-{UID}"], numa_nodes=[0], sockets=[0],
            l3_caches=[0], whole_cores=True, policy="spread", topology_known=True,
            attributes={"dra.cpu/numaNodeID": pb.AttributeValue(int=0)},
        )  # fmt: skip
        return answer


class Context:
    def time_remaining(self) -> float:
        return 40.0


async def test_one_node_prepare_crosses_few_modules_and_seldom_returns(tmp_path: Path) -> None:
    cluster = Cluster(typical_claim())
    metrics = PluginMetrics(CollectorRegistry())
    status = ClaimStatusWriter(
        cluster, driver="dra.cpu", node=NODE, features=FeatureSupport(), metrics=metrics
    )
    metadata = MetadataWriter("dra.cpu", tmp_path / "metadata", tmp_path / "cdi")
    node = NodeService(
        driver="dra.cpu", cluster=cluster, allocator=Allocator(),  # type: ignore[arg-type]
        metadata=metadata, metrics=metrics, status=status,
    )  # fmt: skip
    servicer = DRAPluginV1(node)
    call = v1.NodePrepareResourcesRequest(
        claims=[v1.Claim(namespace="default", name="typical", uid=UID)]
    )
    await servicer.NodePrepareResources(call, Context())
    response, path = await trace(servicer.NodePrepareResources(call, Context()))
    (device,) = response.claims[UID].devices
    assert not response.claims[UID].error and device.device_name == "cpudevnuma000"
    assert device.cdi_device_ids == [f"dra.k8s.io/cpu=claim-{UID}", f"dra.cpu/metadata={UID}_cpus"]
    assert all(m.startswith(PLUGIN) for m in path.modules), path.describe()
    assert len(path.modules) <= MAX_MODULES, path.describe()
    assert path.returns <= MAX_RETURNS, path.describe()
