"""`dev claim` and `dev release`: one claim's whole life, played by the scheduler (a claim
created with an allocation in the run's API-server fake), the kubelet (NodePrepareResources
through the kubelet simulator) and the runtime (a container with the claim's CDI env, created
through the runtime simulator)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dracpu.allocator.domain.memory_flags import memory_flags
from dracpu.core.containers import Container
from dracpu.core.cpuset import CPUSet
from dracpu.core.driver import (
    ATTR_CPU_IDS,
    ATTR_NUMA_NODE,
    CPU_CAPACITY,
    DRIVER_NAME,
    MACHINE_DEVICE,
    cpuset_env_name,
)
from dracpu.core.errors import (
    ConflictError,
    DracpuError,
    InvalidInputError,
    NotFoundError,
    UnavailableError,
)
from dracpu.core.memory import binary_quantity
from dracpu.core.names import check_uid
from dracpu.dev.apiserver.client import ClusterClient
from dracpu.dev.cdi_specs import resolve_env
from dracpu.dev.layout import RunLayout
from dracpu.dev.names import check_name
from dracpu.dev.scheduler import (
    Result,
    allocate_claim,
    devices_of,
    for_cpuset,
    memory_devices_of,
    results_of,
)
from dracpu.dev.sim_clients import KubeletClient, RuntimeClient
from dracpu.dev.up import run_status

REQUEST = "cpus"
MEMORY_REQUEST = "memory"
# The DeviceClass the chart creates for the memory devices (publishMemoryDevices).
MEMORY_CLASS = "dra.cpu-memory"


@dataclass(frozen=True)
class Workload:
    """What `dev claim` made: the claim, and the container that runs on it."""

    namespace: str
    name: str
    uid: str
    devices: list[str]
    cpuset: str  # "" while not prepared (no kubelet simulator in this run)
    container: Container | None  # None without a runtime simulator
    container_cpus: str

    def describe(self) -> str:
        line = f"claim={self.namespace}/{self.name} uid={self.uid}"
        if not self.cpuset:
            return f"{line} devices={','.join(self.devices)} prepared=no (no kubelet simulator)"
        line += f" cpuset={self.cpuset} devices={','.join(self.devices)}"
        if self.container is None:
            return f"{line} container=none (no runtime simulator)"
        return f"{line} container={self.container.container_id} cpus={self.container_cpus}"


def require_running(layout: RunLayout, *, compose: bool = False) -> set[str]:
    """The processes of the `dev up` running on the folder; an error when there is none.

    With compose, the folder is a docker compose stack's: no `dev up` holds it, and its
    simulators are the compose services whose control sockets are there."""
    if compose:
        found = {
            name
            for name, path in (
                ("kubelet-sim", layout.kubelet_sim_socket),
                ("runtime-sim", layout.runtime_sim_socket),
            )
            if path.is_socket()
        }
        if "kubelet-sim" not in found:
            raise UnavailableError(
                f"no compose stack serves {layout.root}: {layout.kubelet_sim_socket} is missing "
                "(start it: docker compose -f compose/docker-compose.yaml up --wait)"
            )
        return found
    status = run_status(layout)
    if status is None:
        raise UnavailableError(
            f"no dracpu dev up is running on {layout.root} "
            f"(start one: dracpu dev up --run-dir {layout.root})"
        )
    if not status:
        raise UnavailableError(f"dracpu dev up on {layout.root} is still starting")
    if status.get("apiserver") == "outside":
        raise InvalidInputError(
            f"the dev up on {layout.root} uses the API server of {status['kubeconfig']}: "
            "create ResourceClaims there and use dracpu dev prepare / unprepare"
        )
    return set(status.get("services", {}))


@contextlib.contextmanager
def scheduling(layout: RunLayout, *, compose: bool = False) -> Iterator[None]:
    """One scheduling decision at a time, as the one scheduler would make them."""
    # A compose stack's run folder is the read-only root of the container: its workloads
    # volume holds the lock.
    lock = (layout.workloads_dir if compose else layout.root) / "scheduler.lock"
    try:
        lock.parent.mkdir(parents=True, exist_ok=True)
        handle = lock.open("a", encoding="utf-8")
    except OSError as exc:
        raise UnavailableError(f"cannot lock {lock}: {exc.strerror or exc}") from exc
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def cluster_client(layout: RunLayout) -> ClusterClient:
    """The run's API-server fake, through the kubeconfig it wrote in the run folder."""
    if not layout.apiserver_kubeconfig.exists():
        raise UnavailableError(
            f"no API-server fake serves {layout.root}: {layout.apiserver_kubeconfig} is missing"
        )
    return ClusterClient(layout.apiserver_kubeconfig)


def next_name(cluster: ClusterClient, namespace: str) -> str:
    number = 1
    while cluster.claim_exists(namespace, f"cpus-{number}"):
        number += 1
    return f"cpus-{number}"


def claim_document(
    namespace: str,
    name: str,
    uid: str,
    cpus: int,
    results: list[Result],
    node: str,
    *,
    numa: int | None,
    cpuset: CPUSet | None,
    pod_uid: str = "",
    memory_placement: str | None = None,
    memory: Mapping[str, int] | None = None,
    shared_pool: str | None = None,
) -> dict[str, Any]:
    """A ResourceClaim as the API server shows it once the scheduler allocated it (and
    reserved it for the pod, when `pod_uid` is given). With `memory` (bytes per capacity) it
    has a second request, of the memory DeviceClass with those capacity requests, and a
    constraint that its device and the CPUs share one NUMA node."""
    grouped = results[0].consumed is not None
    exactly: dict[str, Any] = {
        "deviceClassName": DRIVER_NAME,
        "allocationMode": "ExactCount",
        "count": 1 if grouped else cpus,
    }
    if grouped:
        exactly["capacity"] = {"requests": {CPU_CAPACITY: str(cpus)}}
    if numa is not None:
        domain, _, attribute = ATTR_NUMA_NODE.partition("/")
        expression = f'device.attributes["{domain}"].{attribute} == {numa}'
        exactly["selectors"] = [{"cel": {"expression": expression}}]
    spec: dict[str, Any] = {"devices": {"requests": [{"name": REQUEST, "exactly": exactly}]}}
    if memory:
        spec["devices"]["requests"].append(
            {
                "name": MEMORY_REQUEST,
                "exactly": {
                    "deviceClassName": MEMORY_CLASS,
                    "allocationMode": "ExactCount",
                    "count": 1,
                    "capacity": {
                        "requests": {
                            name: binary_quantity(amount) for name, amount in sorted(memory.items())
                        }
                    },
                },
            }
        )
        spec["devices"]["constraints"] = [
            {"requests": [REQUEST, MEMORY_REQUEST], "matchAttribute": ATTR_NUMA_NODE}
        ]
    allocation: dict[str, Any] = {"devices": {"results": [r.to_document() for r in results]}}
    cpu_config: dict[str, Any] = {}
    if cpuset is not None:
        cpu_config["cpuset"] = cpuset.format()
    if memory_placement is not None:
        cpu_config["memoryPlacement"] = memory_placement
    if shared_pool is not None:
        cpu_config["sharedPool"] = shared_pool
    if cpu_config:
        opaque = {
            "driver": DRIVER_NAME,
            "parameters": {"apiVersion": "v1alpha1", "cpuConfig": cpu_config},
        }
        spec["devices"]["config"] = [{"requests": [REQUEST], "opaque": opaque}]
        allocation["devices"]["config"] = [
            {"source": "FromClaim", "requests": [REQUEST], "opaque": opaque}
        ]
    if node:
        allocation["nodeSelector"] = {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
            ]
        }
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid,
            "creationTimestamp": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        },
        "spec": spec,
        "status": {"allocation": allocation, **_reserved_for(name, pod_uid)},
    }


def _reserved_for(name: str, pod_uid: str) -> dict[str, Any]:
    if not pod_uid:
        return {}
    return {"reservedFor": [{"resource": "pods", "name": f"{name}-pod", "uid": pod_uid}]}


def _reserved_pod(claim: dict[str, Any]) -> str:
    for entry in (claim.get("status") or {}).get("reservedFor") or []:
        if entry.get("resource") == "pods" and entry.get("uid"):
            return str(entry["uid"])
    return str(uuid.uuid4())


def schedule(
    cluster: ClusterClient,
    *,
    cpus: int,
    numa: int | None,
    name: str,
    namespace: str,
    cpuset: CPUSet | None,
    pod_uid: str | None = None,
    memory_placement: str | None = None,
    memory: Mapping[str, int] | None = None,
    shared_pool: str | None = None,
) -> tuple[dict[str, Any], list[Result]]:
    """Allocate a claim as the scheduler would, from the API server's slices and the allocations
    of its claims, and create it there allocated; answers the claim and its results."""
    if cluster.claim_exists(namespace, name):
        raise ConflictError(f"claim {namespace}/{name} already exists")
    devices = devices_of(cluster.slices())
    if cpuset is not None:
        # The external allocator's part: a device whose CPU list attribute holds the cpuset.
        devices = for_cpuset(devices, cpuset)
    results = allocate_claim(
        devices,
        memory_devices_of(cluster.slices()) if memory else [],
        results_of(cluster.claims()),
        cpus,
        memory or {},
        numa=numa,
        request=REQUEST,
        memory_request=MEMORY_REQUEST,
    )
    chosen = next((d for d in devices if d.name == results[0].device), None)
    if cpuset is None and chosen is not None and chosen.cpu_ids is not None:
        raise InvalidInputError(
            "the node's allocator is external"
            + (" (groupBy machine)" if chosen.name == MACHINE_DEVICE else "")
            + f": pass --cpuset with the exact CPUs, from a device's {ATTR_CPU_IDS}"
        )
    node = next((d.node for d in devices if d.pool == results[0].pool), "")
    claim = claim_document(
        namespace,
        name,
        str(uuid.uuid4()),
        cpus,
        results,
        node,
        numa=numa,
        cpuset=cpuset,
        pod_uid=pod_uid or str(uuid.uuid4()),
        memory_placement=memory_placement,
        memory=memory,
        shared_pool=shared_pool,
    )
    cluster.write_claim(claim)
    return claim, results


def _cpuset_from_env(env: list[str], uid: str) -> str:
    key = f"{cpuset_env_name(uid)}="
    for entry in env:
        if entry.startswith(key):
            return CPUSet.parse(entry[len(key) :]).format()
    raise NotFoundError(f"the CDI spec of claim {uid} carries no {cpuset_env_name(uid)}")


def _record_path(layout: RunLayout, namespace: str, name: str) -> Path:
    return layout.workloads_dir / f"{namespace}_{name}.json"


async def claim(
    layout: RunLayout,
    *,
    cpus: int,
    numa: int | None,
    name: str | None,
    namespace: str,
    cpuset: str | None,
    compose: bool = False,
    pod_uid: str | None = None,
    memory_placement: str | None = None,
    memory: str | None = None,
    hugepages: Sequence[str] = (),
    shared_pool: str | None = None,
) -> Workload:
    """Allocate a claim of `cpus` CPUs (and `memory` and `hugepages` of their NUMA node: the
    capacities `memory_flags` reads from `--memory 256Mi` and `--hugepages 2Mi=32Mi`), prepare it
    and run a container on it, as far as the running simulators go."""
    check_name("namespace", namespace)
    if pod_uid is not None:
        check_uid(pod_uid, "pod uid")
    if name is not None:
        check_name("claim name", name)
    exact = CPUSet.parse(cpuset) if cpuset is not None else None
    if exact is not None and len(exact) != cpus:
        raise InvalidInputError(f"--cpuset {cpuset} has {len(exact)} CPUs, --cpus says {cpus}")
    wants = memory_flags(memory, hugepages)
    processes = require_running(layout, compose=compose)
    cluster = cluster_client(layout)
    kubelet = KubeletClient(layout.kubelet_sim_socket)
    runtime = RuntimeClient(layout.runtime_sim_socket)
    with scheduling(layout, compose=compose):
        name = name or next_name(cluster, namespace)
        document, results = schedule(
            cluster,
            cpus=cpus,
            numa=numa,
            name=name,
            namespace=namespace,
            cpuset=exact,
            pod_uid=pod_uid,
            memory_placement=memory_placement,
            memory=wants,
            shared_pool=shared_pool,
        )
    uid = document["metadata"]["uid"]
    workload = Workload(
        namespace=namespace,
        name=name,
        uid=uid,
        devices=[result.device for result in results],
        cpuset="",
        container=None,
        container_cpus="",
    )
    if "kubelet-sim" in processes:
        workload = await _prepare_and_run(
            layout, cluster, workload, kubelet, runtime if "runtime-sim" in processes else None
        )
    path = _record_path(layout, namespace, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {
        **asdict(workload),
        "container": workload.container.fields() if workload.container else None,
    }
    path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    return workload


async def _prepare_and_run(
    layout: RunLayout,
    cluster: ClusterClient,
    workload: Workload,
    kubelet: KubeletClient,
    runtime: RuntimeClient | None,
) -> Workload:
    """Prepare as the kubelet, then create the container as the runtime; undo it all if a
    step fails, so a failed `dev claim` leaves nothing behind."""
    namespace, name, uid = workload.namespace, workload.name, workload.uid
    try:
        cdi_ids = await kubelet.prepare(namespace, name, uid)
    except DracpuError:
        cluster.delete_claim(namespace, name)
        raise
    try:
        # What the runtime injects from the CDI spec before it calls NRI CreateContainer.
        env = resolve_env(layout.cdi_dir, cdi_ids)
        workload = replace(workload, cpuset=_cpuset_from_env(env, uid))
        if runtime is None:
            return workload
        container = Container.of(
            container_id=uuid.uuid4().hex,
            pod_uid=_reserved_pod(cluster.read_claim(namespace, name)),
            pod_namespace=namespace,
            pod_name=f"{name}-pod",
            container_name="main",
        )
        cpus = await runtime.create_container(container, env)
    except DracpuError:
        await kubelet.unprepare(namespace, name, uid)
        cluster.delete_claim(namespace, name)
        raise
    return replace(workload, container=container, container_cpus=cpus)


async def release(
    layout: RunLayout,
    *,
    name: str,
    namespace: str,
    compose: bool = False,
) -> str:
    check_name("namespace", namespace)
    check_name("claim name", name)
    processes = require_running(layout, compose=compose)
    cluster = cluster_client(layout)
    kubelet = KubeletClient(layout.kubelet_sim_socket)
    runtime = RuntimeClient(layout.runtime_sim_socket)
    record_path = _record_path(layout, namespace, name)
    record: dict[str, Any] | None = None
    if record_path.exists():
        record = json.loads(record_path.read_text(encoding="utf-8"))
    uid: str | None = record["uid"] if record else None
    if uid is None:
        try:
            uid = str(cluster.read_claim(namespace, name)["metadata"]["uid"])
        except NotFoundError:
            raise NotFoundError(f"claim {namespace}/{name} not found") from None
    if record is not None and record.get("container") and "runtime-sim" in processes:
        container = Container.of(**record["container"])
        # Already gone from the runtime (its state was wiped): nothing to undo there.
        with contextlib.suppress(NotFoundError):
            await runtime.stop_container(container)
            await runtime.remove_container(container)
    if "kubelet-sim" in processes:
        await kubelet.unprepare(namespace, name, uid)
    cluster.delete_claim(namespace, name)
    record_path.unlink(missing_ok=True)
    cpus = f" cpuset={record['cpuset']}" if record and record.get("cpuset") else ""
    return f"released claim={namespace}/{name} uid={uid}{cpus}"
