"""`dracpu.allocator.v1.Allocator` over gRPC: translates wire messages to the node allocator
and back; every refusal leaves as a precise status (dracpu.core.rpc.rpc_errors)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

from dracpu.allocator import cdi, claims
from dracpu.allocator.devices import (
    ATTR_ALLOCATED_NUM_CPUS,
    DRIVER,
    AttributeValue,
    Device,
)
from dracpu.allocator.node import NodeAllocator, SharedPoolView
from dracpu.allocator.opaque import OpaqueConfig
from dracpu.core import names
from dracpu.core.errors import ForbiddenError, InvalidInputError, NotFoundError
from dracpu.core.rpc import rpc_errors
from dracpu.pb.allocator.v1 import allocator_pb2 as pb
from dracpu.pb.allocator.v1 import allocator_pb2_grpc

SERVICE_NAME = "dracpu.allocator.v1.Allocator"
API_VERSION = "dracpu.allocator.v1"


def attribute_to_proto(value: AttributeValue) -> Any:
    if isinstance(value, bool):
        return pb.AttributeValue(bool=value)
    if isinstance(value, int):
        return pb.AttributeValue(int=value)
    if isinstance(value, str):
        return pb.AttributeValue(string=value)
    return pb.AttributeValue(strings=pb.StringList(values=list(value)))


def attributes_to_proto(attributes: Mapping[str, AttributeValue]) -> dict[str, Any]:
    return {name: attribute_to_proto(value) for name, value in attributes.items()}


def device_to_proto(device: Device) -> Any:
    return pb.Device(
        name=device.name,
        attributes=attributes_to_proto(device.attributes),
        capacity=dict(device.capacity),
        allow_multiple_allocations=device.allow_multiple_allocations,
        cpus=device.cpus.format(),
        node_allocatable_resources={
            resource: pb.NodeAllocatableMapping(
                capacity_key=m.capacity_key,
                capacity_multiplier=m.capacity_multiplier,
                device_multiplier=m.device_multiplier,
            )
            for resource, m in device.node_allocatable.items()
        },
    )


def owner_to_proto(record: claims.ClaimRecord) -> Any:
    if record.owner is None:
        return None
    return pb.ContainerRef(
        container_id=record.container_id,
        pod_uid=record.owner.pod_uid,
        pod_namespace=record.owner.pod_namespace,
        pod_name=record.owner.pod_name,
        container_name=record.owner.container_name,
    )


def claim_to_proto(record: claims.ClaimRecord) -> Any:
    return pb.Claim(
        uid=record.uid,
        namespace=record.namespace,
        name=record.name,
        cpus=record.cpus.format(),
        allocations=[
            pb.ClaimAllocation(
                request=a.request, pool=a.pool, device=a.device, cpus=a.cpus.format()
            )
            for a in record.allocations
        ],
        owner=owner_to_proto(record),
        prepared_at_unix_nano=record.prepared_at_ns,
        policy=record.policy or ("recovered" if record.recovered else ""),
        cdi_device_id=cdi.qualified_name(record.uid),
        owner_running=bool(record.container_id),
    )


def pool_to_proto(view: SharedPoolView) -> Any:
    return pb.SharedPool(
        cpus=view.cpus.format(),
        reserved=view.reserved.format(),
        online=view.online.format(),
        exclusive=view.exclusive.format(),
        generation=view.generation,
        isolated=view.isolated.format(),
        on_isolated=view.on_isolated,
    )


# Bounds on one request: a kubelet claim has at most 32 requests (resource.k8s.io/v1
# DeviceRequestsMaxSize), each result one device; configs and their JSON are as small.
MAX_RESULTS = 128
MAX_CONFIGS = 64
MAX_PARAMETERS = 64 * 1024
MAX_CLAIMS_PER_CONTAINER = 128
MAX_QUANTITY = 64


def check_container(ref: Any) -> None:
    if not ref.pod_uid or not ref.container_name:
        raise InvalidInputError("container reference needs pod_uid and container_name")
    names.check_uid(ref.pod_uid, "pod uid")
    names.check_bounded(ref.container_id, "container id")
    if ref.pod_namespace:
        names.check_namespace(ref.pod_namespace, "pod namespace")
    names.check_runtime_name(ref.pod_name, "pod name")
    names.check_runtime_name(ref.container_name, "container name")


def check_presented(presented: Mapping[str, str]) -> None:
    if len(presented) > MAX_CLAIMS_PER_CONTAINER:
        raise InvalidInputError(
            f"a container presents {len(presented)} claims; at most "
            f"{MAX_CLAIMS_PER_CONTAINER} are accepted"
        )
    for uid in presented:
        names.check_uid(uid)


def check_prepare(request: Any) -> None:
    """Every name of a PrepareRequest as the API server would accept it, and bounded."""
    names.check_uid(request.claim_uid)
    names.check_namespace(request.namespace, "claim namespace")
    names.check_object_name(request.name, "claim name")
    if len(request.results) > MAX_RESULTS or len(request.configs) > MAX_CONFIGS:
        raise InvalidInputError(
            f"claim {request.claim_uid}: {len(request.results)} results and "
            f"{len(request.configs)} configs; at most {MAX_RESULTS} and {MAX_CONFIGS}"
        )
    if len(request.reserved_for_pod_uids) > MAX_RESULTS * 2:
        raise InvalidInputError(f"claim {request.claim_uid}: reservedFor lists too many pods")
    for pod in request.reserved_for_pod_uids:
        names.check_uid(pod, "reservedFor pod uid")
    for r in request.results:
        names.check_request_name(r.request)
        names.check_bounded(r.pool, "pool name")
        names.check_bounded(r.device, "device name")
        names.check_bounded(r.driver, "driver name")
        for key, value in r.consumed_capacity.items():
            names.check_bounded(key, "capacity name")
            names.check_bounded(value, f"capacity {key}", MAX_QUANTITY)
    for c in request.configs:
        for name in c.requests:
            names.check_request_name(name)
        names.check_bounded(c.source, "config source")
        names.check_bounded(c.driver, "config driver")
        if len(c.parameters) > MAX_PARAMETERS:
            raise InvalidInputError(
                f"claim {request.claim_uid}: opaque parameters of {len(c.parameters)} bytes; "
                f"at most {MAX_PARAMETERS}"
            )


def container_from_proto(ref: Any) -> claims.Container:
    check_container(ref)
    return claims.Container(
        container_id=ref.container_id,
        owner=claims.Owner(
            pod_uid=ref.pod_uid,
            container_name=ref.container_name,
            pod_namespace=ref.pod_namespace,
            pod_name=ref.pod_name,
        ),
    )


def prepare_input(request: Any) -> claims.PrepareInput:
    check_prepare(request)
    return claims.PrepareInput(
        uid=request.claim_uid,
        namespace=request.namespace,
        name=request.name,
        results=tuple(
            claims.ResultInput(
                request=r.request,
                device=r.device,
                pool=r.pool,
                driver=r.driver or DRIVER,
                consumed=dict(r.consumed_capacity),
                admin_access=r.admin_access,
            )
            for r in request.results
        ),
        configs=tuple(
            OpaqueConfig(
                source=c.source,
                requests=tuple(c.requests),
                driver=c.driver,
                parameters=bytes(c.parameters),
            )
            for c in request.configs
        ),
        pods=tuple(request.reserved_for_pod_uids),
        pods_known=request.reserved_for_known,
    )


class AllocatorServicer(allocator_pb2_grpc.AllocatorServicer):  # type: ignore[misc]
    def __init__(self, node: NodeAllocator) -> None:
        self.node = node

    @rpc_errors
    async def ListDevices(self, request: Any, context: Any) -> Any:
        model, generation = self.node.devices
        return pb.DeviceList(
            generation=generation,
            driver=DRIVER,
            mode=model.mode,
            group_by=model.group_by,
            devices=[device_to_proto(d) for d in model.devices],
            uses_list_attributes=model.uses_list_attributes,
            health={
                name: pb.DeviceHealth(
                    status=entry.status,
                    message=entry.message,
                    missing_cpus=entry.missing.format(),
                    since_unix=int(entry.since),
                )
                for name, entry in self.node.device_health.entries.items()
            },
        )

    @rpc_errors
    async def Prepare(self, request: Any, context: Any) -> Any:
        outcome = await self.node.prepare(prepare_input(request))
        record = outcome.record
        devices = outcome.state.devices.by_name
        prepared = []
        for allocation in record.allocations:
            device = devices.get(allocation.device)
            attributes = dict(device.attributes) if device is not None else {}
            if allocation.count:
                attributes[ATTR_ALLOCATED_NUM_CPUS] = allocation.count
            prepared.append(
                pb.PreparedDevice(
                    request_names=[allocation.request] if allocation.request else [],
                    pool_name=allocation.pool,
                    device_name=allocation.device,
                    cdi_device_ids=[cdi.qualified_name(record.uid)],
                    cpus=allocation.cpus.format(),
                    attributes=attributes_to_proto(attributes),
                )
            )
        return pb.PrepareResponse(
            claim=claim_to_proto(record),
            devices=prepared,
            already_prepared=outcome.already_prepared,
        )

    @rpc_errors
    async def Unprepare(self, request: Any, context: Any) -> Any:
        if not request.claim_uid:
            raise InvalidInputError("claim uid is empty")
        names.check_uid(request.claim_uid)
        record = await self.node.unprepare(request.claim_uid)
        if record is None:
            return pb.UnprepareResponse(was_prepared=False)
        return pb.UnprepareResponse(was_prepared=True, released_cpus=record.cpus.format())

    @rpc_errors
    async def GetClaim(self, request: Any, context: Any) -> Any:
        record = self.node.state.records.get(request.claim_uid)
        if record is None:
            raise NotFoundError(
                f"claim {names.echo(request.claim_uid)} is not prepared on this node"
            )
        return claim_to_proto(record)

    @rpc_errors
    async def ListClaims(self, request: Any, context: Any) -> Any:
        state = self.node.state
        return pb.ClaimList(
            claims=[claim_to_proto(r) for r in claims.list_claims(state, request.namespace)],
            generation=state.claims_generation,
        )

    @rpc_errors
    async def GetSharedPool(self, request: Any, context: Any) -> Any:
        return pool_to_proto(self.node.shared_pool())

    @rpc_errors
    async def WatchSharedPool(self, request: Any, context: Any) -> AsyncIterator[Any]:
        queue = self.node.subscribe()
        try:
            current = self.node.shared_pool()
            yield pool_to_proto(current)
            last = current.generation
            while True:
                view = await queue.get()
                if view.generation <= last:
                    continue
                last = view.generation
                yield pool_to_proto(view)
        finally:
            self.node.unsubscribe(queue)

    @rpc_errors
    async def AttachContainer(self, request: Any, context: Any) -> Any:
        container = container_from_proto(request.container)
        check_presented(request.claims)
        outcome = await self.node.attach(container, claims.parse_claim_cpus(request.claims))
        return pb.AttachContainerResponse(
            cpus=outcome.cpus.format(),
            shared_pool=pool_to_proto(self.node.shared_pool()),
            newly_bound=outcome.newly_bound,
        )

    @rpc_errors
    async def DetachContainer(self, request: Any, context: Any) -> Any:
        if not request.container_id:
            raise InvalidInputError("container id is empty")
        names.check_bounded(request.container_id, "container id")
        return pb.DetachContainerResponse(claim_uids=await self.node.detach(request.container_id))

    @rpc_errors
    async def ReconcileContainers(self, request: Any, context: Any) -> Any:
        live = set(request.live_container_ids)
        for container_id in live:
            names.check_bounded(container_id, "container id")
        detached = await self.node.reconcile(live)
        return pb.ReconcileContainersResponse(detached_container_ids=detached)

    @rpc_errors
    async def Adopt(self, request: Any, context: Any) -> Any:
        container = container_from_proto(request.container)
        check_presented(request.claims)
        outcome = await self.node.adopt(container, claims.parse_claim_cpus(request.claims))
        return pb.AdoptResponse(
            outcomes=[
                pb.AdoptOutcome(
                    claim_uid=r.uid,
                    accepted=r.accepted,
                    recovered=r.recovered,
                    error=r.error,
                    quarantined=r.quarantined,
                )
                for r in outcome.results
            ],
            cpus=outcome.cpus.format(),
            shared_pool=pool_to_proto(self.node.shared_pool()),
        )

    @rpc_errors
    async def GetSummary(self, request: Any, context: Any) -> Any:
        summary = claims.summary(self.node.state)
        return pb.Summary(
            allocated_cpus=summary.allocated,
            available_cpus=summary.available,
            reserved_cpus=summary.reserved,
            active_claims=summary.active_claims,
            online_cpus=summary.online,
        )


class ReadOnlyAllocatorServicer(AllocatorServicer):
    """The allocator's reads only, for the read-only socket the api uses: every mutating call
    is refused with PERMISSION_DENIED, so a caller that can reach only this socket (the
    network-facing api) cannot prepare, unprepare, attach, detach or adopt."""

    @staticmethod
    def _refuse(method: str) -> ForbiddenError:
        return ForbiddenError(
            f"{method} is not served on the allocator's read-only socket; only the dra-plugin "
            f"and nri-plugin, on the allocator's own socket, may change allocation state"
        )

    @rpc_errors
    async def Prepare(self, request: Any, context: Any) -> Any:
        raise self._refuse("Prepare")

    @rpc_errors
    async def Unprepare(self, request: Any, context: Any) -> Any:
        raise self._refuse("Unprepare")

    @rpc_errors
    async def AttachContainer(self, request: Any, context: Any) -> Any:
        raise self._refuse("AttachContainer")

    @rpc_errors
    async def DetachContainer(self, request: Any, context: Any) -> Any:
        raise self._refuse("DetachContainer")

    @rpc_errors
    async def Adopt(self, request: Any, context: Any) -> Any:
        raise self._refuse("Adopt")

    @rpc_errors
    async def ReconcileContainers(self, request: Any, context: Any) -> Any:
        raise self._refuse("ReconcileContainers")
