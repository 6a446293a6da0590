"""dracpu.dra_plugin.v1.DRAPluginView: the read-only status the api sidecar shows."""

from __future__ import annotations

import grpc

from dracpu.dra_plugin.cluster import Cluster
from dracpu.dra_plugin.paths import KubeletPaths
from dracpu.dra_plugin.publisher import SlicePublisher
from dracpu.dra_plugin.registration import Registration
from dracpu.pb.dra_plugin.v1 import dra_plugin_pb2, dra_plugin_pb2_grpc


class PluginView(dra_plugin_pb2_grpc.DRAPluginViewServicer):  # type: ignore[misc]
    def __init__(
        self,
        node: str,
        paths: KubeletPaths,
        registration: Registration,
        publisher: SlicePublisher,
        cluster: Cluster,
    ) -> None:
        self.node = node
        self.paths = paths
        self.registration = registration
        self.publisher = publisher
        self.cluster = cluster

    async def GetStatus(
        self, request: dra_plugin_pb2.GetStatusRequest, context: grpc.aio.ServicerContext
    ) -> dra_plugin_pb2.PluginStatus:
        reg = self.registration.state
        pub = self.publisher.state
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
                for m in pub.missing_features
            ],
            slice_sync=self.publisher.mode,
            node_uid=pub.owner_uid,
        )
