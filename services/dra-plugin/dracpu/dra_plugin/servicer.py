"""Every gRPC servicer of the dra-plugin.

On the kubelet's DRA endpoint (add_kubelet_services): the DRA node service, v1 and v1beta1
over one NodeService (DRAPluginV1, DRAPluginV1Beta1), and device health, v1 and v1alpha1 over
one DeviceHealth (DRAResourceHealthV1, DRAResourceHealthV1Alpha1). On the registration socket:
the plugin watcher's pluginregistration.Registration. On --socket: the read-only
dracpu.dra_plugin.v1.DRAPluginView the api sidecar shows.

Overall gRPC errors are reserved for requests that cannot be answered at all (the allocator
silent for all the time the kubelet's deadline leaves: UNAVAILABLE, tried again); every claim
gets its own entry (the kubelet rejects a response that skips one).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping
from typing import TypeVar

import grpc

from dracpu.core.log import get_logger
from dracpu.core.rpc import rpc_errors
from dracpu.dra_plugin.cluster.objects import Cluster
from dracpu.dra_plugin.cluster.status_writer import ClaimStatusWriter
from dracpu.dra_plugin.common.resource_claim import ClaimRef
from dracpu.dra_plugin.kubelet.call_budget import CallBudget
from dracpu.dra_plugin.kubelet.health import DeviceHealth
from dracpu.dra_plugin.kubelet.node_service import NodeService, PrepareOutcome
from dracpu.dra_plugin.kubelet.registration import PluginRegistration
from dracpu.dra_plugin.paths import KubeletPaths
from dracpu.dra_plugin.publishing.publisher import SlicePublisher, verdicts
from dracpu.pb.dra_plugin.v1 import dra_plugin_pb2, dra_plugin_pb2_grpc
from dracpu.pb.kubelet.dra.v1 import api_pb2 as v1
from dracpu.pb.kubelet.dra.v1 import api_pb2_grpc as v1_grpc
from dracpu.pb.kubelet.dra.v1beta1 import api_pb2 as v1beta1
from dracpu.pb.kubelet.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from dracpu.pb.kubelet.dra_health.v1 import api_pb2 as health_v1
from dracpu.pb.kubelet.dra_health.v1 import api_pb2_grpc as health_v1_grpc
from dracpu.pb.kubelet.dra_health.v1alpha1 import api_pb2 as health_v1alpha1
from dracpu.pb.kubelet.dra_health.v1alpha1 import api_pb2_grpc as health_v1alpha1_grpc
from dracpu.pb.kubelet.pluginregistration.v1 import api_pb2 as registration_pb2
from dracpu.pb.kubelet.pluginregistration.v1 import api_pb2_grpc as registration_grpc

log = get_logger(__name__)

# The strings the kubelet matches in PluginInfo.supported_versions (k8s.io/kubelet
# pkg/apis/dra/*/types.go, pkg/apis/dra-health/*/types.go). The kubelet takes the first DRA
# service of ours it supports, so v1 comes first.
DRA_SERVICES = ("v1.DRAPlugin", "v1beta1.DRAPlugin")
HEALTH_SERVICES = ("v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth")


def _refs(claims: Iterable[v1.Claim | v1beta1.Claim]) -> list[ClaimRef]:
    return [ClaimRef(namespace=c.namespace, name=c.name, uid=c.uid) for c in claims]


# Either API version's responses: the same fields, in messages of their own.
_Prepared = TypeVar(
    "_Prepared", v1.NodePrepareResourcesResponse, v1beta1.NodePrepareResourcesResponse
)
_Unprepared = TypeVar(
    "_Unprepared", v1.NodeUnprepareResourcesResponse, v1beta1.NodeUnprepareResourcesResponse
)


def _build_prepare(response: _Prepared, outcomes: Mapping[str, PrepareOutcome]) -> _Prepared:
    for uid, outcome in outcomes.items():
        entry = response.claims[uid]
        entry.error = outcome.error
        for device in outcome.devices:
            out = entry.devices.add(
                request_names=device.request_names,
                pool_name=device.pool_name,
                device_name=device.device_name,
                cdi_device_ids=device.cdi_device_ids,
            )
            if device.share_id and isinstance(out, v1.Device):  # only v1 can carry it
                out.share_id = device.share_id
    return response


def _build_unprepare(response: _Unprepared, errors: Mapping[str, str]) -> _Unprepared:
    for uid, error in errors.items():
        response.claims[uid].error = error
    return response


class DRAPluginV1(v1_grpc.DRAPluginServicer):  # type: ignore[misc]
    def __init__(self, node: NodeService) -> None:
        self.node = node

    @rpc_errors
    async def NodePrepareResources(
        self, request: v1.NodePrepareResourcesRequest, context: grpc.aio.ServicerContext
    ) -> v1.NodePrepareResourcesResponse:
        return _build_prepare(
            v1.NodePrepareResourcesResponse(),
            await self.node.prepare(_refs(request.claims), CallBudget.of(context)),
        )

    @rpc_errors
    async def NodeUnprepareResources(
        self, request: v1.NodeUnprepareResourcesRequest, context: grpc.aio.ServicerContext
    ) -> v1.NodeUnprepareResourcesResponse:
        return _build_unprepare(
            v1.NodeUnprepareResourcesResponse(),
            await self.node.unprepare(_refs(request.claims), CallBudget.of(context)),
        )


class DRAPluginV1Beta1(v1beta1_grpc.DRAPluginServicer):  # type: ignore[misc]
    def __init__(self, node: NodeService) -> None:
        self.node = node

    @rpc_errors
    async def NodePrepareResources(
        self, request: v1beta1.NodePrepareResourcesRequest, context: grpc.aio.ServicerContext
    ) -> v1beta1.NodePrepareResourcesResponse:
        return _build_prepare(
            v1beta1.NodePrepareResourcesResponse(),
            await self.node.prepare(_refs(request.claims), CallBudget.of(context)),
        )

    @rpc_errors
    async def NodeUnprepareResources(
        self, request: v1beta1.NodeUnprepareResourcesRequest, context: grpc.aio.ServicerContext
    ) -> v1beta1.NodeUnprepareResourcesResponse:
        return _build_unprepare(
            v1beta1.NodeUnprepareResourcesResponse(),
            await self.node.unprepare(_refs(request.claims), CallBudget.of(context)),
        )


# Both health API versions stream the same snapshots, spelled in their own generated messages.
class DRAResourceHealthV1(health_v1_grpc.DRAResourceHealthServicer):  # type: ignore[misc]
    def __init__(self, health: DeviceHealth) -> None:
        self.health = health

    @rpc_errors
    async def NodeWatchResources(
        self, request: health_v1.NodeWatchResourcesRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[health_v1.NodeWatchResourcesResponse]:
        log.info(2, "kubelet watches device health", api="v1")
        async for item in self.health.snapshots(health_v1):
            yield item


class DRAResourceHealthV1Alpha1(health_v1alpha1_grpc.DRAResourceHealthServicer):  # type: ignore[misc]
    def __init__(self, health: DeviceHealth) -> None:
        self.health = health

    @rpc_errors
    async def NodeWatchResources(
        self,
        request: health_v1alpha1.NodeWatchResourcesRequest,
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[health_v1alpha1.NodeWatchResourcesResponse]:
        log.info(2, "kubelet watches device health", api="v1alpha1")
        async for item in self.health.snapshots(health_v1alpha1):
            yield item


def add_kubelet_services(server: grpc.aio.Server, node: NodeService, health: DeviceHealth) -> None:
    """The DRA endpoint's services: DRA_SERVICES and HEALTH_SERVICES."""
    v1_grpc.add_DRAPluginServicer_to_server(DRAPluginV1(node), server)
    v1beta1_grpc.add_DRAPluginServicer_to_server(DRAPluginV1Beta1(node), server)
    health_v1alpha1_grpc.add_DRAResourceHealthServicer_to_server(
        DRAResourceHealthV1Alpha1(health), server
    )
    health_v1_grpc.add_DRAResourceHealthServicer_to_server(DRAResourceHealthV1(health), server)


class Registration(registration_grpc.RegistrationServicer):  # type: ignore[misc]
    """pluginregistration.Registration, answered from and recorded in a PluginRegistration."""

    def __init__(self, registration: PluginRegistration) -> None:
        self.registration = registration

    async def GetInfo(
        self, request: registration_pb2.InfoRequest, context: grpc.aio.ServicerContext
    ) -> registration_pb2.PluginInfo:
        return self.registration.info_requested()

    async def NotifyRegistrationStatus(
        self, request: registration_pb2.RegistrationStatus, context: grpc.aio.ServicerContext
    ) -> registration_pb2.RegistrationStatusResponse:
        self.registration.notified(request.plugin_registered, request.error)
        if request.plugin_registered:
            return registration_pb2.RegistrationStatusResponse()
        # As the upstream helper does: a failed registration is answered with an error.
        await context.abort(
            grpc.StatusCode.UNKNOWN, f"failed registration process: {request.error}"
        )
        raise AssertionError("unreachable")  # abort raises


class PluginView(dra_plugin_pb2_grpc.DRAPluginViewServicer):  # type: ignore[misc]
    """dracpu.dra_plugin.v1.DRAPluginView: the read-only status the api sidecar shows."""

    def __init__(
        self,
        node: str,
        paths: KubeletPaths,
        registration: PluginRegistration,
        publisher: SlicePublisher,
        cluster: Cluster,
        status: ClaimStatusWriter | None = None,
    ) -> None:
        self.node = node
        self.status = status
        self.paths = paths
        self.registration = registration
        self.publisher = publisher
        self.cluster = cluster

    async def GetStatus(
        self, request: dra_plugin_pb2.GetStatusRequest, context: grpc.aio.ServicerContext
    ) -> dra_plugin_pb2.PluginStatus:
        reg = self.registration.state
        pub = self.publisher.state
        writer = self.status.state if self.status is not None else None
        return dra_plugin_pb2.PluginStatus(
            node_name=self.node,
            registered=reg.registered,
            registration_error=reg.error,
            registration_socket=str(self.paths.registration_socket),
            dra_socket=str(self.paths.dra_socket),
            published_generation=pub.published_generation,
            slice_count=pub.slice_count,
            last_publish_error=pub.last_error,
            last_published_at_unix=int(pub.last_published_at),
            claim_source=self.cluster.describe(),
            missing_api_features=[
                dra_plugin_pb2.MissingApiFeature(
                    name=m.name,
                    feature_gate=m.gate,
                    reason=m.reason,
                    detected_at_unix=int(m.detected_at),
                )
                # Slice fields and claim status alike: the publisher's record is shared.
                for m in self.publisher.features.missing.values()
            ],
            slice_sync=self.publisher.mode,
            node_uid=pub.owner_uid,
            claim_status_pending=len(writer.pending) if writer else 0,
            claim_status_written=writer.written if writer else 0,
            last_claim_status_error=writer.last_error if writer else "",
            prerequisites=[p.to_proto() for p in verdicts(self.publisher)],
        )
