"""Pure translations from the services' protobuf replies to the api's response models.

A reply that breaks the contract (a cpuset that does not parse) is a ProtocolError naming the
service, which the api answers with 502: the peer, not the caller, is at fault.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from typing import Any, Literal

from dracpu.api import models
from dracpu.core.containers import Container
from dracpu.core.cpuset import CPUSet
from dracpu.core.errors import CPUSetError, InvalidInputError, ProtocolError
from dracpu.core.machine import Machine


def cpuset(text: str, service: str, what: str) -> CPUSet:
    try:
        return CPUSet.parse(text)
    except CPUSetError as exc:
        raise ProtocolError(f"{service} sent an invalid cpuset for {what}: {exc}") from None


def timestamp(seconds: float) -> datetime | None:
    """Protobuf zero means unset."""
    return datetime.fromtimestamp(seconds, UTC) if seconds > 0 else None


def machine(inventory: Any) -> Machine:
    try:
        return Machine.from_proto(inventory)
    except InvalidInputError as exc:
        raise ProtocolError(f"topology sent an unusable inventory: {exc}") from None


# ---- versions and status ---------------------------------------------------------------------


def version(reply: Any) -> models.ServiceVersion:
    return models.ServiceVersion(
        service=reply.service,
        version=reply.version,
        api_version=reply.api_version,
        python_version=reply.python_version,
        started_at=timestamp(reply.started_at_unix),
        pid=reply.pid,
    )


def kubelet_registration(reply: Any) -> models.KubeletRegistration:
    return models.KubeletRegistration(
        node_name=reply.node_name,
        registered=reply.registered,
        registration_error=reply.registration_error,
        registration_socket=reply.registration_socket,
        dra_socket=reply.dra_socket,
        published_generation=reply.published_generation,
        slice_count=reply.slice_count,
        last_publish_error=reply.last_publish_error,
        last_published_at=timestamp(reply.last_published_at_unix),
        claim_source=reply.claim_source,
        slice_sync=reply.slice_sync,
        node_uid=reply.node_uid,
        missing_api_features=[
            models.MissingApiFeature(
                name=m.name,
                feature_gate=m.feature_gate,
                reason=m.reason,
                detected_at=timestamp(m.detected_at_unix),
            )
            for m in reply.missing_api_features
        ],
        claim_status_pending=reply.claim_status_pending,
        claim_status_written=reply.claim_status_written,
        last_claim_status_error=reply.last_claim_status_error,
    )


def prerequisites(service: str, reply: Any) -> list[models.Prerequisite]:
    return [
        models.Prerequisite(
            service=service,
            name=p.name,
            ok=p.ok,
            message=p.message,
            checked_at=timestamp(p.checked_at_unix),
        )
        for p in reply.prerequisites
    ]


def runtime_connection(reply: Any) -> models.RuntimeConnection:
    return models.RuntimeConnection(
        connected=reply.connected,
        runtime_name=reply.runtime_name,
        runtime_version=reply.runtime_version,
        socket=reply.socket,
        last_error=reply.last_error,
        unsolicited_updates=reply.unsolicited_updates,
        synchronized_at=timestamp(reply.synchronized_at_unix),
        shared_pool=reply.shared_pool,
        shared_pool_generation=reply.shared_pool_generation,
    )


# ---- topology --------------------------------------------------------------------------------


def topology_summary(node: Machine) -> models.TopologySummary:
    return models.TopologySummary(
        sockets=len(node.sockets),
        numa_nodes=len(node.numa_nodes),
        l3_caches=len([cache for cache in node.uncore_caches if cache >= 0]),
        cores=len(node.cores),
        cpus=len(node.cpus),
        smt_enabled=node.smt_enabled,
        online=node.online.format(),
        core_types=dict(sorted(Counter(cpu.core_type for cpu in node.cpus).items())),
    )


def topology(inventory: Any) -> models.TopologyView:
    node = machine(inventory)
    return models.TopologyView(
        summary=topology_summary(node),
        online=node.online.format(),
        smt_control=node.smt_control,
        fingerprint=inventory.fingerprint,
        sysfs_root=node.sysfs_root,
        discovered_at=timestamp(inventory.discovered_at_unix),
        skipped=list(node.skipped),
        cpus=[
            models.CPUView(
                cpu_id=cpu.cpu_id,
                core_id=cpu.core_id,
                physical_core_index=cpu.physical_core_index,
                socket_id=cpu.socket_id,
                cluster_id=cpu.cluster_id,
                numa_node_id=cpu.numa_node_id,
                l3_id=cpu.uncore_cache_id,
                core_type=cpu.core_type,
                siblings=cpu.siblings.format(),
                numa_node_cpus=cpu.numa_node_cpus.format(),
                pcie_roots=list(cpu.pcie_roots),
            )
            for cpu in node.cpus
        ],
        memory=[
            models.NodeMemoryView(
                numa_node_id=memory.node,
                mem_total_bytes=memory.mem_total_bytes,
                hugepages=[
                    models.HugepagePoolView(
                        size=pool.size_name,
                        size_bytes=pool.size_bytes,
                        total=pool.total,
                        free=pool.free,
                        total_bytes=pool.total_bytes,
                    )
                    for pool in memory.hugepages
                ],
                problems=list(memory.problems),
            )
            for memory in node.memory
        ],
    )


# ---- devices ---------------------------------------------------------------------------------


def attribute(value: Any) -> models.AttributeValue:
    kind = value.WhichOneof("value")
    if kind == "int":
        return models.IntAttribute(int=value.int)
    if kind == "bool":
        return models.BoolAttribute(bool=value.bool)
    if kind == "version":
        return models.VersionAttribute(version=value.version)
    if kind == "strings":
        return models.StringsAttribute(strings=list(value.strings.values))
    if kind == "ints":
        return models.IntsAttribute(ints=list(value.ints.values))
    # Unset oneof reads as the empty string, the proto3 default.
    return models.StringAttribute(string=value.string)


def devices(
    reply: Any, claims: Any, publication: models.Publication | models.Unavailable
) -> models.DevicesView:
    """Devices with what the prepared claims consume of each (their allocations' CPUs)."""
    consumed: dict[str, CPUSet] = {}
    users: dict[str, list[str]] = {}
    for claim in claims.claims:
        for allocation in claim.allocations:
            cpus = cpuset(allocation.cpus, "allocator", f"claim {claim.uid}")
            consumed[allocation.device] = consumed.get(allocation.device, CPUSet()) | cpus
            owners = users.setdefault(allocation.device, [])
            if claim.uid not in owners:
                owners.append(claim.uid)
    views = []
    for device in reply.devices:
        used = consumed.get(device.name, CPUSet())
        views.append(
            models.DeviceView(
                name=device.name,
                cpus=device.cpus,
                attributes={
                    name: attribute(device.attributes[name]) for name in sorted(device.attributes)
                },
                capacity=dict(sorted(device.capacity.items())),
                allow_multiple_allocations=device.allow_multiple_allocations,
                consumed=models.Consumption(
                    cpus=used.format(), count=len(used), claims=sorted(users.get(device.name, []))
                ),
                health=device_health(reply.health[device.name])
                if device.name in reply.health
                else None,
            )
        )
    published = {device.name for device in reply.devices}
    return models.DevicesView(
        driver=reply.driver,
        mode=reply.mode,
        group_by=reply.group_by,
        generation=reply.generation,
        devices=views,
        publication=publication,
        withdrawn={
            name: device_health(entry)
            for name, entry in sorted(reply.health.items())
            if name not in published
        },
    )


def device_health(entry: Any) -> models.DeviceHealthView:
    status: Literal["Healthy", "Unhealthy", "Unknown"] = "Unknown"
    if entry.status in ("Healthy", "Unhealthy"):
        status = entry.status
    return models.DeviceHealthView(
        status=status,
        message=entry.message,
        missing_cpus=cpuset(entry.missing_cpus, "allocator", "device health").format(),
        since=timestamp(entry.since_unix),
    )


def publication(status: Any, device_generation: int) -> models.Publication:
    return models.Publication(
        published_generation=status.published_generation,
        up_to_date=status.published_generation == device_generation,
        slice_count=status.slice_count,
        last_publish_error=status.last_publish_error,
        last_published_at=timestamp(status.last_published_at_unix),
    )


# ---- claims, shared pool, containers --------------------------------------------------------


def _claim_fields(reply: Any) -> dict[str, Any]:
    """A ClaimView as plain data; the cpuset is checked and counted, kept as written."""
    cpus = cpuset(reply.cpus, "allocator", f"claim {reply.uid}")
    ref = reply.owner
    owner = (
        {**Container.of_message(ref).fields(), "running": reply.owner_running}
        if ref.container_id
        else None
    )
    return {
        "uid": reply.uid,
        "namespace": reply.namespace,
        "name": reply.name,
        "cpus": reply.cpus,
        "cpu_count": len(cpus),
        "devices": [
            {
                "request": allocation.request,
                "pool": allocation.pool,
                "device": allocation.device,
                "cpus": allocation.cpus,
            }
            for allocation in reply.allocations
        ],
        "owner": owner,
        "prepared_at": timestamp(reply.prepared_at_unix_nano / 1e9),
        "policy": reply.policy,
        "cdi_device_id": reply.cdi_device_id,
        "memory_nodes": reply.memory_nodes,
        "shared_pool": "include" if reply.shares_pool else "exclude",
        "memory": [
            {"numa_node": m.numa_node, "kind": m.kind, "bytes": m.bytes} for m in reply.memory
        ],
    }


def claim(reply: Any) -> models.ClaimView:
    return models.ClaimView.model_validate(_claim_fields(reply))


def claim_list_fields(reply: Any) -> dict[str, Any]:
    """The ClaimList body as plain data. /v1/claims serialises this directly: validating a
    thousand claims costs more than the rest of the request; the tests validate the body
    against models.ClaimList instead."""
    return {"generation": reply.generation, "claims": [_claim_fields(c) for c in reply.claims]}


def shared_pool(reply: Any) -> models.SharedPoolView:
    def parsed(text: str, what: str) -> tuple[str, int]:
        cpus = cpuset(text, "allocator", what)
        return cpus.format(), len(cpus)

    shared, shared_count = parsed(reply.cpus, "the shared pool")
    reserved, reserved_count = parsed(reply.reserved, "the reserved CPUs")
    exclusive, exclusive_count = parsed(reply.exclusive, "the exclusive CPUs")
    online, online_count = parsed(reply.online, "the online CPUs")
    isolated, _ = parsed(reply.isolated, "the isolated CPUs")
    return models.SharedPoolView(
        cpus=shared,
        cpu_count=shared_count,
        reserved=reserved,
        reserved_count=reserved_count,
        exclusive=exclusive,
        exclusive_count=exclusive_count,
        online=online,
        online_count=online_count,
        generation=reply.generation,
        isolated=isolated,
        on_isolated=reply.on_isolated,
    )


def containers(reply: Any) -> models.ContainerList:
    return models.ContainerList(
        containers=[
            models.ContainerView(
                **Container.of_message(entry).fields(),
                claim_uids=list(entry.claim_uids),
                cpus=entry.cpus,
                exclusive=entry.exclusive,
                state=entry.state or "unknown",
                runs_on=(
                    "claimed + shared"
                    if entry.claimed_cpus
                    else "claimed"
                    if entry.exclusive
                    else "shared"
                ),
                claimed_cpus=entry.claimed_cpus,
            )
            for entry in reply.containers
        ]
    )
