"""The api's response bodies as typed models, so the OpenAPI document is the contract.

A part of an answer that comes from a service that is down is an `Unavailable` object
(`status: "unavailable"` plus the reason) in place of the data, never a silent gap.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema

from dracpu.core import config_schema
from dracpu.core.config import DriverConfig

SERVICES = ("topology", "allocator", "dra-plugin", "nri-plugin")
ServiceName = Literal["topology", "allocator", "dra-plugin", "nri-plugin"]


class Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Problem(Model):
    """RFC 9457 problem details, served as application/problem+json."""

    type: str = "about:blank"
    title: str
    status: int
    detail: str
    instance: str | None = None
    service: str | None = Field(default=None, description="the backend service the error concerns")


class Unavailable(Model):
    """Stands in for data a backend service could not provide."""

    status: Literal["unavailable"] = "unavailable"
    service: str
    reason: str


# ---- versions and health ---------------------------------------------------------------------


class ServiceVersion(Model):
    status: Literal["available"] = "available"
    service: str
    version: str
    api_version: str
    python_version: str
    started_at: datetime | None
    pid: int


VersionOrUnavailable = Annotated[ServiceVersion | Unavailable, Field(discriminator="status")]


class ServiceHealth(Model):
    service: str
    socket: str
    status: str = Field(
        description="grpc.health.v1 status (SERVING, NOT_SERVING, ...) or UNAVAILABLE"
    )
    version: VersionOrUnavailable
    last_error: str | None = Field(description="the last failed call the api made to it")
    last_error_at: datetime | None


class MissingApiFeature(Model):
    name: str = Field(
        description="the field left out: nodeAllocatableResources, listTypeAttributes "
        "(ResourceSlices) or resourceClaimDeviceStatus (ResourceClaim status.devices)"
    )
    feature_gate: str = Field(description="the API server feature gate that enables it")
    reason: str = Field(description="the API server's own message, or what it did to the field")
    detected_at: datetime | None


class KubeletRegistration(Model):
    status: Literal["available"] = "available"
    node_name: str
    registered: bool
    registration_error: str
    registration_socket: str
    dra_socket: str
    published_generation: int
    slice_count: int
    last_publish_error: str
    last_published_at: datetime | None
    claim_source: str
    slice_sync: str = Field(
        description="watch (the API server's changes are watched) or resync (listed periodically)"
    )
    node_uid: str = Field(description="the Node owning the ResourceSlices; empty when none")
    missing_api_features: list[MissingApiFeature] = Field(
        description="optional API fields the API server lacks; the driver works on without them"
    )
    claim_status_pending: int = Field(
        default=0, description="claims whose status.devices the plugin has yet to write"
    )
    claim_status_written: int = Field(
        default=0, description="status.devices writes that succeeded since the plugin started"
    )
    last_claim_status_error: str = Field(
        default="", description="the API server's last refusal of a status.devices write"
    )


class RuntimeConnection(Model):
    status: Literal["available"] = "available"
    connected: bool
    runtime_name: str
    runtime_version: str
    socket: str
    last_error: str
    unsolicited_updates: bool
    synchronized_at: datetime | None
    shared_pool: str = Field(description="the allocator's shared pool as the plugin last saw it")
    shared_pool_generation: int


class Prerequisite(Model):
    service: str = Field(
        description="who checks it: dra-plugin (the API server and the kubelet's CPU and Memory "
        "Managers) or nri-plugin (the runtime)"
    )
    name: str = Field(
        description="resource.k8s.io/v1, DRAConsumableCapacity, cpuManagerPolicy, "
        "memoryManagerPolicy, NRI or CDI"
    )
    ok: bool
    message: str = Field(
        description="one line: what is missing and how to turn it on; when ok, what was found"
    )
    checked_at: datetime | None


class HealthView(Model):
    api: ServiceVersion
    services: list[ServiceHealth]
    kubelet_registration: Annotated[
        KubeletRegistration | Unavailable, Field(discriminator="status")
    ]
    runtime: Annotated[RuntimeConnection | Unavailable, Field(discriminator="status")]
    prerequisites: list[Prerequisite] = Field(
        default_factory=list,
        description="what the cluster and the runtime must offer the driver, as the dra-plugin "
        "and the nri-plugin last judged it; a prerequisite not judged yet is not listed",
    )


class Liveness(Model):
    status: Literal["ok"] = "ok"


class UnreadyLoop(Model):
    """A service's supervised loop that keeps it NOT_SERVING (dracpu.core.supervisor)."""

    service: str
    loop: str = Field(description="the loop's name, as in dra_cpu_loop_restarts_total")
    state: str = Field(
        description="restarting (waiting out its backoff after it failed or ended) or running "
        "(restarted, but failed too often in a row to count as ready yet)"
    )
    restarts: int
    failures_in_row: int
    last_error: str = Field(description="the exception's type and message")
    last_error_at: datetime | None


class Readiness(Model):
    ready: bool
    services: dict[str, str] = Field(description="service -> gRPC health status or UNAVAILABLE")
    loops: list[UnreadyLoop] = Field(
        default_factory=list,
        description="the loops keeping a NOT_SERVING service unready, as it reports them",
    )


# ---- node and topology -----------------------------------------------------------------------


class TopologySummary(Model):
    status: Literal["available"] = "available"
    sockets: int
    numa_nodes: int
    l3_caches: int
    cores: int
    cpus: int
    smt_enabled: bool
    online: str
    core_types: dict[str, int] = Field(description="core type -> number of CPUs")


# The effective driver configuration, every field of the model (dracpu.core.config_model) spelled
# as the file spells it. Its value and its schema are both derived from the model, so a field
# added there is answered and documented here without a change.
DriverConfigView = Annotated[dict[str, Any], WithJsonSchema(config_schema.api_schema())]


def driver_config_view(config: DriverConfig) -> dict[str, Any]:
    return config.as_given()


class NodeView(Model):
    node_name: str
    topology: Annotated[TopologySummary | Unavailable, Field(discriminator="status")]
    config: DriverConfigView = Field(description="the effective driver configuration")
    versions: list[VersionOrUnavailable] = Field(description="api first, then the four services")


class CPUView(Model):
    cpu_id: int
    core_id: int
    physical_core_index: int
    socket_id: int
    cluster_id: int
    numa_node_id: int
    l3_id: int
    core_type: str
    siblings: str
    numa_node_cpus: str
    pcie_roots: list[str]


class HugepagePoolView(Model):
    size: str = Field(description="the page size as Kubernetes names it: 2Mi, 1Gi")
    size_bytes: int
    total: int = Field(description="pages in the pool (nr_hugepages)")
    free: int | None = Field(description="free pages (free_hugepages); null when unreadable")
    total_bytes: int


class NodeMemoryView(Model):
    numa_node_id: int
    mem_total_bytes: int | None = Field(
        description="the node's MemTotal; null when its meminfo is missing or unreadable"
    )
    hugepages: list[HugepagePoolView] = Field(description="ascending by page size")
    problems: list[str] = Field(description="what could not be read, as `path: reason`")


class TopologyView(Model):
    summary: TopologySummary
    online: str
    smt_control: str
    fingerprint: str
    sysfs_root: str
    discovered_at: datetime | None
    skipped: list[str]
    cpus: list[CPUView]
    memory: list[NodeMemoryView] = Field(
        default_factory=list,
        description="each NUMA node's memory and hugepage pools; empty from topology services "
        "that predate memory discovery",
    )


# ---- devices ---------------------------------------------------------------------------------


class _Attribute(Model):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


# One class per ResourceSlice attribute spelling ({"int": 3}, {"string": "p-core"}, ...), so the
# schema says exactly one key is present. Trailing underscores keep the builtins usable.
class IntAttribute(_Attribute):
    int_: int = Field(alias="int")


class BoolAttribute(_Attribute):
    bool_: bool = Field(alias="bool")


class StringAttribute(_Attribute):
    string: str


class VersionAttribute(_Attribute):
    version: str


class StringsAttribute(_Attribute):
    strings: list[str]


class IntsAttribute(_Attribute):
    ints: list[int]


AttributeValue = (
    IntAttribute
    | BoolAttribute
    | StringAttribute
    | VersionAttribute
    | StringsAttribute
    | IntsAttribute
)


class Consumption(Model):
    cpus: str
    count: int
    claims: list[str] = Field(description="UIDs of the prepared claims using the device")


class DeviceHealthView(Model):
    status: Literal["Healthy", "Unhealthy", "Unknown"] = Field(
        description="Unhealthy: CPUs of the device are offline; Unknown: topology unreadable"
    )
    message: str
    missing_cpus: str = Field(description="CPUs the device had that are offline or gone")
    since: datetime | None = Field(description="when the status last changed")


class DeviceView(Model):
    name: str
    cpus: str
    attributes: dict[str, AttributeValue]
    capacity: dict[str, str]
    allow_multiple_allocations: bool
    consumed: Consumption
    health: DeviceHealthView | None = Field(
        default=None, description="as the kubelet is told; unset from allocators without health"
    )


class Publication(Model):
    status: Literal["available"] = "available"
    published_generation: int
    up_to_date: bool = Field(description="the dra-plugin published the current device generation")
    slice_count: int
    last_publish_error: str
    last_published_at: datetime | None


class DevicesView(Model):
    driver: str
    mode: str
    group_by: str
    generation: int
    devices: list[DeviceView]
    publication: Annotated[Publication | Unavailable, Field(discriminator="status")]
    withdrawn: dict[str, DeviceHealthView] = Field(
        default_factory=dict,
        description="devices no longer published because their CPUs went offline",
    )


# ---- claims, shared pool, containers --------------------------------------------------------


class ClaimDevice(Model):
    request: str
    pool: str
    device: str
    cpus: str


class ClaimMemory(Model):
    numa_node: int
    kind: str = Field(description="memory, or hugepages-<size> as the kubelet names it (2Mi)")
    bytes: int


class ClaimOwner(Model):
    container_id: str
    pod_uid: str
    pod_namespace: str
    pod_name: str
    container_name: str
    running: bool


class ClaimView(Model):
    uid: str
    namespace: str
    name: str
    cpus: str
    cpu_count: int
    devices: list[ClaimDevice]
    owner: ClaimOwner | None = Field(description="unset until a container presents the claim")
    prepared_at: datetime | None
    policy: str
    cdi_device_id: str
    memory_nodes: str = Field(
        description="NUMA nodes the claim's container takes memory from (cpuset.mems), in "
        'cpuset format; "" when the claim\'s memory is not placed (every node)'
    )
    memory: list[ClaimMemory] = Field(
        default_factory=list,
        description="the NUMA node memory and hugepages the claim holds of memory devices",
    )
    shared_pool: Literal["include", "exclude"] = Field(
        default="exclude",
        description="cpuConfig.sharedPool: include when the claim's container runs on the "
        "shared pool too, besides the claim's own CPUs",
    )


class ClaimList(Model):
    generation: int
    claims: list[ClaimView]


class SharedPoolView(Model):
    cpus: str
    cpu_count: int
    reserved: str
    reserved_count: int
    exclusive: str
    exclusive_count: int
    online: str
    online_count: int
    generation: int
    isolated: str = Field(
        default="", description="the kernel's isolated CPUs; kept out of the pool when possible"
    )
    on_isolated: bool = Field(
        default=False,
        description="no other CPU is free, so containers without a claim run on isolated CPUs",
    )


class ContainerView(Model):
    container_id: str
    pod_uid: str
    pod_namespace: str
    pod_name: str
    container_name: str
    claim_uids: list[str]
    cpus: str
    exclusive: bool = Field(description="pinned to claim CPUs; false means the shared pool")
    state: str
    runs_on: Literal["claimed", "claimed + shared", "shared"] = Field(
        default="shared",
        description="its claims' CPUs only, its claims' CPUs and the shared pool "
        "(cpuConfig.sharedPool: include), or the shared pool",
    )
    claimed_cpus: str = Field(
        default="",
        description='running on "claimed + shared": the own CPUs of its claims, which `cpus` '
        'holds with the shared pool; "" otherwise',
    )


class ContainerList(Model):
    containers: list[ContainerView]
