"""What the node did with a claim, written into its ResourceClaim's `status.devices`.

One AllocatedDeviceStatus (resource.k8s.io/v1, KEP-4817) per device of ours in the claim's
allocation, keyed as the API keys the list: driver, pool, device and, for a shared device,
the allocation result's shareID. `data` holds the CPUs the device's result received, where
they lie and the memory the claim holds; a `Ready` condition says whether the prepare
succeeded. Pure functions: no I/O (`dracpu.dra_plugin.cluster.status_writer` does the
writing).
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from dracpu.core import __version__
from dracpu.core.cpuset import CPUSet
from dracpu.core.errors import CPUSetError
from dracpu.dra_plugin.common.resource_claim import (
    Condition,
    DeviceKey,
    DeviceStatus,
    ResourceClaim,
)
from dracpu.pb.allocator.v1 import allocator_pb2

READY = "Ready"
PREPARED = "Prepared"
PREPARE_FAILED = "PrepareFailed"
# resource.k8s.io/v1 limits: AllocatedDeviceStatusDataMaxLength, AllocatedDeviceStatusMaxConditions
# and metav1.Condition's message length.
MAX_DATA = 10 * 1024
MAX_CONDITIONS = 8
MAX_MESSAGE = 32768
_REASON = re.compile(r"[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?")


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _condition(
    claim: ResourceClaim, key: DeviceKey, ready: bool, reason: str, message: str
) -> Condition:
    """A metav1.Condition; its lastTransitionTime is kept from the entry already stored when
    the status did not change (a prepare repeated after a restart)."""
    status = "True" if ready else "False"
    since = _now()
    for stored in claim.devices:
        if (stored.driver, stored.pool, stored.device, stored.share_id) != key:
            continue
        for old in stored.conditions:
            if old.type == READY and old.status == status:
                since = old.last_transition_time or since
    return Condition(
        type=READY,
        status=status,
        reason=reason if _REASON.fullmatch(reason) else PREPARE_FAILED,
        message=message[:MAX_MESSAGE],
        last_transition_time=since,
        observed_generation=claim.generation,
    )


def memory_data(memory: Iterable[allocator_pb2.ClaimMemory]) -> list[dict[str, Any]]:
    """What the claim holds of memory devices, one entry per NUMA node and kind, as the
    allocator records it: `{numaNode, kind, bytes}`."""
    return [{"numaNode": m.numa_node, "kind": m.kind, "bytes": m.bytes} for m in memory]


def placement_data(
    device: allocator_pb2.PreparedDevice,
    policy: str,
    memory_nodes: str = "",
    memory: Iterable[allocator_pb2.ClaimMemory] = (),
) -> dict[str, Any]:
    """`data` of a prepared device: its exact CPUs and, from an allocator that reports them,
    the NUMA nodes, sockets and L3 caches they lie on and whether they are whole cores; the
    claim's memory nodes where its memory is placed, and the memory it holds of memory
    devices."""
    data: dict[str, Any] = {"cpuset": device.cpus}
    if device.topology_known:
        data["numaNodes"] = list(device.numa_nodes)
        data["sockets"] = list(device.sockets)
        data["l3Caches"] = list(device.l3_caches)
        data["wholeCores"] = device.whole_cores
    if memory_nodes:
        with contextlib.suppress(CPUSetError):  # an allocator's garbage is left out
            data["memoryNodes"] = CPUSet.parse(memory_nodes).sorted()
    held = memory_data(memory)
    if held:
        data["memory"] = held
    chosen = device.policy or policy
    if chosen:
        data["policy"] = chosen
    data["driverVersion"] = __version__
    if len(json.dumps(data, separators=(",", ":"))) > MAX_DATA:
        # Only a cpuset of thousands of scattered CPUs gets here; the claim view has it all.
        data = {"cpuCount": len(CPUSet.parse(device.cpus)), "truncated": True,
                "driverVersion": __version__}  # fmt: skip
    return data


def prepared_entries(
    driver: str,
    claim: ResourceClaim,
    response: allocator_pb2.PrepareResponse,
    shares: Mapping[tuple[str, str, str], str],
) -> list[DeviceStatus]:
    """One Ready entry per prepared device result (a device of two requests is one entry
    unless they hold different shares of it)."""
    found: dict[DeviceKey, tuple[Condition, dict[str, Any]]] = {}
    for device in response.devices:
        share = next(
            (
                shares[(name, device.pool_name, device.device_name)]
                for name in device.request_names
                if (name, device.pool_name, device.device_name) in shares
            ),
            "",
        )
        key = (driver, device.pool_name, device.device_name, share)
        if key not in found:
            condition = _condition(claim, key, True, PREPARED, f"CPUs {device.cpus} pinned")
            data = placement_data(
                device, response.claim.policy, response.claim.memory_nodes, response.claim.memory
            )
            found[key] = (condition, data)
        else:  # the same share of a device for another request: one entry, CPUs merged
            data = found[key][1]
            merged = CPUSet.parse(data.get("cpuset", "")) | CPUSet.parse(device.cpus)
            data["cpuset"] = merged.format()
    return [
        DeviceStatus(*key, conditions=(condition,), data=data)
        for key, (condition, data) in found.items()
    ]


def failed_entries(driver: str, claim: ResourceClaim, error: str) -> list[DeviceStatus]:
    """Ready=False, with the reason, for each device of ours the claim was allocated."""
    entries: dict[DeviceKey, DeviceStatus] = {}
    for result in claim.results:
        key = (result.driver, result.pool, result.device, result.share_id)
        if result.driver != driver or key in entries:
            continue
        condition = _condition(claim, key, False, PREPARE_FAILED, error)
        entries[key] = DeviceStatus(
            *key, conditions=(condition,), data={"driverVersion": __version__}
        )
    return list(entries.values())
