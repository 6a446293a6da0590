"""Between the messages of the runtime and the allocator and the CPU plugin's records: a runtime
container as a registry record and as the allocator's container reference, a cpuset as a
container update, the allocator's memory nodes as a cpuset."""

from __future__ import annotations

from collections.abc import Mapping

from dracpu.core.containers import Container
from dracpu.core.cpuset import EMPTY, CPUSet
from dracpu.core.errors import DracpuError
from dracpu.core.log import get_logger
from dracpu.nri_plugin.state.registry import ContainerRecord
from dracpu.nri_plugin.transport.container_names import container_name
from dracpu.pb.allocator.v1 import allocator_pb2
from dracpu.pb.nri import api_pb2

log = get_logger(__name__)

_STATES = {
    api_pb2.CONTAINER_CREATED: "created",
    api_pb2.CONTAINER_PAUSED: "paused",
    api_pb2.CONTAINER_RUNNING: "running",
    api_pb2.CONTAINER_STOPPED: "stopped",
}


def cpuset_update(container_id: str, cpus: CPUSet, mems: CPUSet = EMPTY) -> api_pb2.ContainerUpdate:
    """An update to `cpus`, and to the memory nodes `mems` when there are any (none leaves the
    container's memory nodes as they are)."""
    update = api_pb2.ContainerUpdate(container_id=container_id)
    update.linux.resources.cpu.cpus = cpus.format()
    if mems:
        update.linux.resources.cpu.mems = mems.format()
    return update


def record_update(record: ContainerRecord, pool: CPUSet | None) -> api_pb2.ContainerUpdate:
    """The update that puts `record`'s container on its `target(pool)`, with its claims'
    memory nodes when it has claims."""
    return cpuset_update(
        record.container_id, record.target(pool), record.mems if record.exclusive else EMPTY
    )


def runtime_container(pod: api_pb2.PodSandbox, ctr: api_pb2.Container) -> Container:
    """The container as the runtime describes it in an NRI event."""
    return Container.of(ctr.id, pod.uid, pod.namespace, pod.name, container_name(ctr))


def container_ref(pod: api_pb2.PodSandbox, ctr: api_pb2.Container) -> allocator_pb2.ContainerRef:
    return allocator_pb2.ContainerRef(**runtime_container(pod, ctr).fields())


def container_record(
    pod: api_pb2.PodSandbox, ctr: api_pb2.Container, claims: tuple[str, ...], cpus: CPUSet
) -> ContainerRecord:
    """The registry's record of a runtime container with its claims and cpuset."""
    return ContainerRecord(
        container=runtime_container(pod, ctr),
        claims=claims,
        cpus=cpus,
        state=_STATES.get(ctr.state, "created" if ctr.state == 0 else "unknown"),
    )


def same_cpus(text: str, cpus: CPUSet) -> bool:
    """Whether a cpuset the runtime reported (empty: none, so every CPU) is `cpus`; one it cannot
    have meant is not."""
    try:
        return CPUSet.parse(text) == cpus if text else False
    except DracpuError:
        return False


def memory_nodes(text: str, container_id: str) -> CPUSet:
    """The allocator's memory nodes for a container; one it cannot have meant (a garbled list)
    is logged and leaves the container's memory nodes alone rather than fail the container."""
    try:
        return CPUSet.parse(text)
    except DracpuError as exc:
        log.error(
            "allocator sent unusable memory nodes; left unset",
            container=container_id,
            error=str(exc),
        )
        return EMPTY


# A page size as the kubelet names it (2Mi) -> as runc's hugetlb limits spell it (2MB).
_RUNC_UNITS = {"Ki": "KB", "Mi": "MB", "Gi": "GB", "Ti": "TB"}


def hugepage_limits(limits: Mapping[str, int]) -> list[api_pb2.HugepageLimit]:
    """The allocator's hugepage limits as the runtime takes them; a size it cannot spell
    is left out (the allocator only names sizes the kernel's pools have)."""
    spelled = []
    for size, limit in sorted(limits.items()):
        unit = _RUNC_UNITS.get(size[-2:])
        if unit is None or not size[:-2].isdigit():
            log.error("allocator sent an unusable hugepage size; no limit set", size=size)
            continue
        spelled.append(api_pb2.HugepageLimit(page_size=size[:-2] + unit, limit=limit))
    return spelled
