"""The allocator's PrepareRequest as the dra-plugin sends it, for one claim of one device."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from dracpu.pb.allocator.v1 import allocator_pb2


def prepare_request(
    uid: str,
    count: int | str | None = 1,
    *,
    device: str = "cpudevnuma000",
    namespace: str = "default",
    name: str = "",
    pool: str = "node",
    driver: str = "dra.cpu",
    request: str = "cpus",
    pods: Sequence[str] | None = None,
    cpu_config: Mapping[str, Any] | None = None,
    configs: Sequence[allocator_pb2.OpaqueConfig] = (),
    memory: Mapping[str, str] | None = None,
    memory_device: str = "memory-node-0",
) -> allocator_pb2.PrepareRequest:
    """A PrepareRequest for claim `uid` (named `name`, else claim-<first 8 of uid>) in
    `namespace`: one result of `device` in `pool` consuming `count` CPUs (None: no consumed
    capacity, as for an individual CPU device). `pods` are the pods it is reserved for (None:
    unknown, as from a dra-plugin older than reservedFor); `cpu_config` becomes the claim's
    opaque cpuConfig parameters, before `configs`. `memory` adds a second result (request
    "mem") of `memory_device` consuming those capacities."""
    capacity = {} if count is None else {"dra.cpu/cpu": str(count)}
    opaque = []
    if cpu_config is not None:
        parameters = {"apiVersion": "v1alpha1", "cpuConfig": dict(cpu_config)}
        opaque.append(
            allocator_pb2.OpaqueConfig(
                source="FromClaim", driver=driver, parameters=json.dumps(parameters).encode()
            )
        )
    results = [
        allocator_pb2.AllocationResult(
            request=request, driver=driver, pool=pool, device=device, consumed_capacity=capacity
        )
    ]
    if memory is not None:
        results.append(
            allocator_pb2.AllocationResult(
                request="mem",
                driver=driver,
                pool=pool,
                device=memory_device,
                consumed_capacity=dict(memory),
            )
        )
    return allocator_pb2.PrepareRequest(
        claim_uid=uid,
        namespace=namespace,
        name=name or f"claim-{uid[:8]}",
        results=results,
        configs=[*opaque, *configs],
        reserved_for_pod_uids=list(pods or ()),
        reserved_for_known=pods is not None,
    )
