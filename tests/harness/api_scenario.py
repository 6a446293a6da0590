"""The scenario the api's stand-in services serve (tests/api/standin_services.py): the
xeon-2s-ht node with three claims prepared, its devices, shared pool and containers, as the
services' protobuf messages in JSON, and the figures the api tests check against it.
"""

from __future__ import annotations

from google.protobuf import json_format

from dracpu.core.cpuset import CPUSet
from dracpu.pb.allocator.v1 import allocator_pb2
from dracpu.pb.common.v1 import prerequisite_pb2
from dracpu.pb.dra_plugin.v1 import dra_plugin_pb2
from dracpu.pb.nri_plugin.v1 import nri_plugin_pb2

# xeon-2s-ht: socket 0 = CPUs 0-9,20-29, socket 1 = 10-19,30-39
FIXTURE = "xeon-2s-ht"
RESERVED = "0,20"
UID_DB = "0a1b2c3d-0000-4000-8000-000000000001"
UID_BATCH = "0a1b2c3d-0000-4000-8000-000000000002"
UID_CACHE = "0a1b2c3d-0000-4000-8000-000000000003"
PREPARED_AT_NS = 1_780_000_000_123_000_000  # 2026-05-28T20:26:40.123Z
CLAIMS = (
    # uid, namespace, name, device, cpus, owner (pod, container, running) or None
    (UID_DB, "team-a", "db", "cpudevnuma000", "2-3,22-23", ("db-0", "postgres", True)),
    (UID_BATCH, "team-b", "batch", "cpudevnuma001", "12-15,32-35", None),
    (UID_CACHE, "team-a", "cache", "cpudevnuma001", "30", ("cache-0", "redis", False)),
)
# The claims whose memory is placed: their NUMA nodes (cpuset.mems); the others have none.
MEMORY_NODES = {UID_DB: "0"}
EXCLUSIVE = "2-3,12-15,22-23,30,32-35"
ONLINE = "0-39"
# The nri-plugin's verdict on a runtime that started a claimed container without its variable.
CDI_MISSING = (
    f"container default/db/postgres asks the runtime for CDI device dra.k8s.io/cpu=claim-{UID_DB} "
    f"but its env lacks DRA_CPUSET_{UID_DB}: the runtime does not inject CDI devices"
)
SHARED = (CPUSet.parse(ONLINE) - CPUSet.parse(RESERVED) - CPUSet.parse(EXCLUSIVE)).format()


def _claim(uid: str, ns: str, name: str, device: str, cpus: str, owner: object) -> object:
    claim = allocator_pb2.Claim(
        uid=uid,
        namespace=ns,
        name=name,
        cpus=cpus,
        allocations=[
            allocator_pb2.ClaimAllocation(request="cpus", pool="node-a", device=device, cpus=cpus)
        ],
        prepared_at_unix_nano=PREPARED_AT_NS,
        policy="packed",
        cdi_device_id=f"dra.k8s.io/cpu=claim-{uid}",
        memory_nodes=MEMORY_NODES.get(uid, ""),
    )
    if owner is not None:
        pod, container, running = owner  # type: ignore[misc]
        claim.owner.CopyFrom(
            allocator_pb2.ContainerRef(
                container_id=f"ctr-{container}",
                pod_uid=f"pod-{pod}",
                pod_namespace=ns,
                pod_name=pod,
                container_name=container,
            )
        )
        claim.owner_running = running
    return claim


def _device(name: str, node: int, cpus: str, allocatable: int) -> object:
    attrs = {
        "dra.cpu/numaNodeID": allocator_pb2.AttributeValue(int=node),
        "dra.cpu/socketID": allocator_pb2.AttributeValue(int=node),
        "dra.cpu/smtEnabled": allocator_pb2.AttributeValue(bool=True),
        "dra.cpu/coreType": allocator_pb2.AttributeValue(string="standard"),
        "resource.kubernetes.io/pcieRoot": allocator_pb2.AttributeValue(
            strings=allocator_pb2.StringList(values=[f"pci0000:{0x80 * node:02x}"])
        ),
    }
    return allocator_pb2.Device(
        name=name,
        attributes=attrs,
        capacity={"dra.cpu/cpu": str(allocatable)},
        allow_multiple_allocations=True,
        cpus=cpus,
    )


def scenario() -> dict[str, object]:
    def js(message: object) -> object:
        return json_format.MessageToDict(message, preserving_proto_field_name=True)  # type: ignore[arg-type]

    devices = allocator_pb2.DeviceList(
        generation=7,
        driver="dra.cpu",
        mode="grouped",
        group_by="numanode",
        devices=[
            _device("cpudevnuma000", 0, "1-9,21-29", 18),
            _device("cpudevnuma001", 1, "10-19,30-39", 20),
        ],
        uses_list_attributes=True,
    )
    pool = allocator_pb2.SharedPool(
        cpus=SHARED, reserved=RESERVED, online=ONLINE, exclusive=EXCLUSIVE, generation=4
    )
    containers = [
        nri_plugin_pb2.ContainerView(
            container_id="ctr-postgres",
            pod_uid="pod-db-0",
            pod_namespace="team-a",
            pod_name="db-0",
            container_name="postgres",
            claim_uids=[UID_DB],
            cpus="2-3,22-23",
            exclusive=True,
            state="running",
        ),
        nri_plugin_pb2.ContainerView(
            container_id="ctr-web",
            pod_uid="pod-web-0",
            pod_namespace="team-c",
            pod_name="web-0",
            container_name="nginx",
            cpus=SHARED,
            exclusive=False,
            state="running",
        ),
    ]
    return {
        "allocator": {
            "devices": js(devices),
            "claims": [js(_claim(*entry)) for entry in CLAIMS],
            "shared_pool": js(pool),
        },
        "dra-plugin": {
            "status": js(
                dra_plugin_pb2.PluginStatus(
                    node_name="node-a",
                    registered=True,
                    registration_socket="/var/lib/kubelet/plugins_registry/dra.cpu/dra.cpu-reg.sock",
                    dra_socket="/var/lib/kubelet/plugins/dra.cpu/dra.sock",
                    published_generation=7,
                    slice_count=1,
                    last_published_at_unix=1_780_000_100,
                    claim_source="kubernetes",
                    slice_sync="resync",
                    missing_api_features=[
                        dra_plugin_pb2.MissingApiFeature(
                            name="listTypeAttributes",
                            feature_gate="DRAListTypeAttributes",
                            reason="spec.devices[0].attributes: Forbidden: list-type attributes",
                            detected_at_unix=1_780_000_050,
                        )
                    ],
                    prerequisites=[
                        prerequisite_pb2.Prerequisite(
                            name="resource.k8s.io/v1",
                            ok=True,
                            message="the API server serves resource.k8s.io/v1",
                            checked_at_unix=1_780_000_010,
                        )
                    ],
                )
            )
        },
        "nri-plugin": {
            "containers": [js(c) for c in containers],
            "status": js(
                nri_plugin_pb2.PluginStatus(
                    connected=True,
                    runtime_name="containerd",
                    runtime_version="2.2.1",
                    socket="/var/run/nri/nri.sock",
                    synchronized_at_unix=1_780_000_050,
                    prerequisites=[
                        prerequisite_pb2.Prerequisite(
                            name="CDI",
                            ok=False,
                            message=CDI_MISSING,
                            checked_at_unix=1_780_000_060,
                        )
                    ],
                )
            ),
        },
    }
