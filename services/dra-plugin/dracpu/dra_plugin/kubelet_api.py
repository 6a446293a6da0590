"""The kubelet-facing gRPC servicers: DRA v1 and v1beta1 over one NodeService.

Overall gRPC errors are reserved for requests that cannot be answered at all; every claim gets
its own entry (the kubelet rejects a response that skips one).
"""

from __future__ import annotations

from typing import Any

import grpc

from dracpu.core.rpc import rpc_errors
from dracpu.dra_plugin.claims import ClaimRef
from dracpu.dra_plugin.node_service import NodeService
from dracpu.pb.kubelet.dra.v1 import api_pb2 as v1
from dracpu.pb.kubelet.dra.v1 import api_pb2_grpc as v1_grpc
from dracpu.pb.kubelet.dra.v1beta1 import api_pb2 as v1beta1
from dracpu.pb.kubelet.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc

# The strings the kubelet matches in PluginInfo.supported_versions (k8s.io/kubelet
# pkg/apis/dra/*/types.go, pkg/apis/dra-health/*/types.go). The kubelet takes the first DRA
# service of ours it supports, so v1 comes first.
DRA_SERVICES = ("v1.DRAPlugin", "v1beta1.DRAPlugin")


def _refs(claims: Any) -> list[ClaimRef]:
    return [ClaimRef(namespace=c.namespace, name=c.name, uid=c.uid) for c in claims]


def _build_prepare(module: Any, outcomes: dict[str, Any]) -> Any:
    response = module.NodePrepareResourcesResponse()
    for uid, outcome in outcomes.items():
        entry = response.claims[uid]
        entry.error = outcome.error
        for device in outcome.devices:
            out = module.Device(
                request_names=device.request_names,
                pool_name=device.pool_name,
                device_name=device.device_name,
                cdi_device_ids=device.cdi_device_ids,
            )
            if device.share_id and module is v1:
                out.share_id = device.share_id
            entry.devices.append(out)
    return response


def _build_unprepare(module: Any, errors: dict[str, str]) -> Any:
    response = module.NodeUnprepareResourcesResponse()
    for uid, error in errors.items():
        response.claims[uid].error = error
    return response


class DRAPluginV1(v1_grpc.DRAPluginServicer):  # type: ignore[misc]
    def __init__(self, node: NodeService) -> None:
        self.node = node

    @rpc_errors
    async def NodePrepareResources(
        self, request: v1.NodePrepareResourcesRequest, context: grpc.aio.ServicerContext
    ) -> Any:
        return _build_prepare(v1, await self.node.prepare(_refs(request.claims)))

    @rpc_errors
    async def NodeUnprepareResources(
        self, request: v1.NodeUnprepareResourcesRequest, context: grpc.aio.ServicerContext
    ) -> Any:
        return _build_unprepare(v1, await self.node.unprepare(_refs(request.claims)))


class DRAPluginV1Beta1(v1beta1_grpc.DRAPluginServicer):  # type: ignore[misc]
    def __init__(self, node: NodeService) -> None:
        self.node = node

    @rpc_errors
    async def NodePrepareResources(
        self, request: v1beta1.NodePrepareResourcesRequest, context: grpc.aio.ServicerContext
    ) -> Any:
        return _build_prepare(v1beta1, await self.node.prepare(_refs(request.claims)))

    @rpc_errors
    async def NodeUnprepareResources(
        self, request: v1beta1.NodeUnprepareResourcesRequest, context: grpc.aio.ServicerContext
    ) -> Any:
        return _build_unprepare(v1beta1, await self.node.unprepare(_refs(request.claims)))


def add_to_server(server: grpc.aio.Server, node: NodeService) -> None:
    v1_grpc.add_DRAPluginServicer_to_server(DRAPluginV1(node), server)
    v1beta1_grpc.add_DRAPluginServicer_to_server(DRAPluginV1Beta1(node), server)
