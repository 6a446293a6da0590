"""The allocator's wire messages and its domain values, each way: the devices, claims and
shared pool as allocator_pb2 messages, requests checked (every name as the API server would
accept it, and bounded) and turned into the claim rules' inputs."""

from __future__ import annotations

from collections.abc import Mapping

from dracpu.allocator import claims
from dracpu.allocator.domain import opaque
from dracpu.allocator.domain.device_health import HealthBook
from dracpu.allocator.domain.devices import AttributeValue, Device, DeviceModel
from dracpu.allocator.live.state import SharedPoolView
from dracpu.core import names
from dracpu.core.containers import Container
from dracpu.core.cpuset import CPUSet
from dracpu.core.driver import (
    ATTR_ALLOCATED_NUM_CPUS,
    ATTR_MEMORY_NODES,
    DRIVER_NAME,
    cdi_device_id,
    memory_bytes_attribute,
)
from dracpu.core.errors import InvalidInputError
from dracpu.core.machine import Machine
from dracpu.pb.allocator.v1 import allocator_pb2


def attribute_to_proto(value: AttributeValue) -> allocator_pb2.AttributeValue:
    if isinstance(value, bool):
        return allocator_pb2.AttributeValue(bool=value)
    if isinstance(value, int):
        return allocator_pb2.AttributeValue(int=value)
    if isinstance(value, str):
        return allocator_pb2.AttributeValue(string=value)
    return allocator_pb2.AttributeValue(strings=allocator_pb2.StringList(values=list(value)))


def attributes_to_proto(
    attributes: Mapping[str, AttributeValue],
) -> dict[str, allocator_pb2.AttributeValue]:
    return {name: attribute_to_proto(value) for name, value in attributes.items()}


def device_to_proto(device: Device) -> allocator_pb2.Device:
    return allocator_pb2.Device(
        name=device.name,
        attributes=attributes_to_proto(device.attributes),
        capacity=dict(device.capacity),
        allow_multiple_allocations=device.allow_multiple_allocations,
        cpus=device.cpus.format(),
        node_allocatable_resources={
            resource: allocator_pb2.NodeAllocatableMapping(
                capacity_key=m.capacity_key,
                capacity_multiplier=m.capacity_multiplier,
                device_multiplier=m.device_multiplier,
            )
            for resource, m in device.node_allocatable.items()
        },
    )


def owner_to_proto(record: claims.ClaimRecord) -> allocator_pb2.ContainerRef | None:
    if record.owner is None:
        return None
    return allocator_pb2.ContainerRef(**Container(record.container_id, record.owner).fields())


def claim_to_proto(record: claims.ClaimRecord) -> allocator_pb2.Claim:
    return allocator_pb2.Claim(
        uid=record.uid,
        namespace=record.namespace,
        name=record.name,
        cpus=record.cpus.format(),
        allocations=[
            allocator_pb2.ClaimAllocation(
                request=a.request, pool=a.pool, device=a.device, cpus=a.cpus.format()
            )
            for a in record.allocations
        ],
        owner=owner_to_proto(record),
        prepared_at_unix_nano=record.prepared_at_ns,
        policy=record.policy or ("recovered" if record.recovered else ""),
        cdi_device_id=cdi_device_id(record.uid),
        owner_running=bool(record.container_id),
        memory_nodes=record.memory_nodes.format(),
        shares_pool=record.shares_pool,
        memory=[
            allocator_pb2.ClaimMemory(numa_node=m.node, kind=m.kind, bytes=m.bytes)
            for m in record.memory
        ],
    )


def pool_to_proto(view: SharedPoolView) -> allocator_pb2.SharedPool:
    return allocator_pb2.SharedPool(
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


def check_container(ref: allocator_pb2.ContainerRef) -> None:
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


def check_prepare(request: allocator_pb2.PrepareRequest) -> None:
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


def container_from_proto(ref: allocator_pb2.ContainerRef) -> Container:
    check_container(ref)
    return Container.of_message(ref)


def prepare_input(request: allocator_pb2.PrepareRequest) -> claims.PrepareInput:
    """A checked PrepareRequest as the claim rules' input. Here, where the allocator receives
    the claim, its opaque configuration is parsed, once: the parsed value travels with the
    prepare, and a refused entry fails the prepare where the rule that reads it runs."""
    check_prepare(request)
    configs = tuple(
        opaque.OpaqueConfig(
            source=c.source,
            requests=tuple(c.requests),
            driver=c.driver,
            parameters=bytes(c.parameters),
        )
        for c in request.configs
    )
    return claims.PrepareInput(
        uid=request.claim_uid,
        namespace=request.namespace,
        name=request.name,
        results=tuple(
            claims.ResultInput(
                request=r.request,
                device=r.device,
                pool=r.pool,
                driver=r.driver or DRIVER_NAME,
                consumed=dict(r.consumed_capacity),
                admin_access=r.admin_access,
            )
            for r in request.results
        ),
        configs=configs,
        pods=tuple(request.reserved_for_pod_uids),
        pods_known=request.reserved_for_known,
        config=opaque.parse_configs(configs),
    )


def device_list(
    model: DeviceModel, generation: int, health: HealthBook
) -> allocator_pb2.DeviceList:
    return allocator_pb2.DeviceList(
        generation=generation,
        driver=DRIVER_NAME,
        mode=model.mode,
        group_by=model.group_by,
        devices=[device_to_proto(d) for d in model.devices],
        uses_list_attributes=model.uses_list_attributes,
        health={
            name: allocator_pb2.DeviceHealth(
                status=entry.status,
                message=entry.message,
                missing_cpus=entry.missing.format(),
                since_unix=int(entry.since),
            )
            for name, entry in health.entries.items()
        },
    )


def add_placement(device: allocator_pb2.PreparedDevice, machine: Machine, cpus: CPUSet) -> None:
    """Where `cpus` lie on `machine`, into the PreparedDevice's topology fields. A CPU the
    machine no longer has (gone offline since) counts in none of them, and the cores are then
    not known to be whole."""
    by_id = machine.by_id
    known = [by_id[c] for c in cpus if c in by_id]
    device.numa_nodes.extend(sorted({c.numa_node_id for c in known}))
    device.sockets.extend(sorted({c.socket_id for c in known}))
    device.l3_caches.extend(sorted({c.uncore_cache_id for c in known if c.uncore_cache_id >= 0}))
    device.whole_cores = (
        bool(known) and len(known) == len(cpus) and all(c.siblings.issubset(cpus) for c in known)
    )
    device.topology_known = True


def memory_attributes(record: claims.ClaimRecord) -> dict[str, int]:
    """The device-metadata attributes of the memory the claim holds: the bytes of each kind,
    summed over its NUMA nodes (`dra.cpu/memoryNodes` names the nodes); none when it holds
    no memory."""
    totals: dict[str, int] = {}
    for amount in record.memory:
        name = memory_bytes_attribute(amount.kind)
        totals[name] = totals.get(name, 0) + amount.bytes
    return dict(sorted(totals.items()))


def prepare_response(outcome: claims.PrepareOutcome) -> allocator_pb2.PrepareResponse:
    """A prepared claim and, for each of its allocations, the device it came from and where
    its CPUs lie."""
    record = outcome.record
    claim = claim_to_proto(record)
    devices = outcome.state.devices.by_name
    prepared = []
    for allocation in record.allocations:
        device = devices.get(allocation.device)
        attributes = dict(device.attributes) if device is not None else {}
        if allocation.count:
            attributes[ATTR_ALLOCATED_NUM_CPUS] = allocation.count
        if record.memory_nodes:
            attributes[ATTR_MEMORY_NODES] = record.memory_nodes.format()
        attributes.update(memory_attributes(record))
        message = allocator_pb2.PreparedDevice(
            request_names=[allocation.request] if allocation.request else [],
            pool_name=allocation.pool,
            device_name=allocation.device,
            cdi_device_ids=[claim.cdi_device_id],
            cpus=allocation.cpus.format(),
            attributes=attributes_to_proto(attributes),
            policy=allocation.policy,
        )
        add_placement(message, outcome.state.machine, allocation.cpus)
        prepared.append(message)
    return allocator_pb2.PrepareResponse(
        claim=claim,
        devices=prepared,
        already_prepared=outcome.already_prepared,
    )


def adopt_response(
    outcome: claims.AdoptOutcome, pool: SharedPoolView
) -> allocator_pb2.AdoptResponse:
    return allocator_pb2.AdoptResponse(
        outcomes=[
            allocator_pb2.AdoptOutcome(
                claim_uid=r.uid,
                accepted=r.accepted,
                recovered=r.recovered,
                error=r.error,
                quarantined=r.quarantined,
            )
            for r in outcome.results
        ],
        cpus=outcome.cpus.format(),
        shared_pool=pool_to_proto(pool),
        memory_nodes=outcome.memory_nodes.format(),
        shared_pool_claims=outcome.shared_pool_claims,
    )


def summary_to_proto(summary: claims.Summary) -> allocator_pb2.Summary:
    return allocator_pb2.Summary(
        allocated_cpus=summary.allocated,
        available_cpus=summary.available,
        reserved_cpus=summary.reserved,
        active_claims=summary.active_claims,
        online_cpus=summary.online,
    )
