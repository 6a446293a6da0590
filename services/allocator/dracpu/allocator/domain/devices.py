"""The devices the node publishes, derived from the topology and the driver configuration.

Pure: the same machine and configuration always give the same devices, so the allocator can
rebuild them at any time and other services never recompute them. Names, attributes and
capacity follow the reference driver's attribute tables (pkg/device/builder.go).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

from dracpu.allocator.domain import external
from dracpu.core.config import MemoryPlacement
from dracpu.core.cpuset import CPUSet
from dracpu.core.driver import (
    ATTR_CACHE_L3_ID,
    ATTR_CORE_ID,
    ATTR_CORE_TYPE,
    ATTR_CPU_ID,
    ATTR_CPU_IDS,
    ATTR_ISOLATED,
    ATTR_LEGACY_NET_NUMA_NODE,
    ATTR_LEGACY_NUMA_NODE_ID,
    ATTR_NOHZ_FULL,
    ATTR_NUM_CPUS,
    ATTR_NUM_ISOLATED_CPUS,
    ATTR_NUM_NOHZ_FULL_CPUS,
    ATTR_NUMA_NODE,
    ATTR_PCIE_ROOT,
    ATTR_SMT_ENABLED,
    ATTR_SMT_LAYOUT,
    ATTR_SOCKET_ID,
    CPU_CAPACITY,
    MACHINE_DEVICE,
    MEMORY_CAPACITY,
    hugepages_capacity,
    individual_device_name,
    memory_device_name,
    numa_device_name,
    socket_device_name,
)
from dracpu.core.errors import ConfigError
from dracpu.core.machine import Machine
from dracpu.core.memory import binary_quantity

Mode = Literal["grouped", "individual"]
GroupBy = Literal["numanode", "socket", "machine"]
Allocator = Literal["cpumanager", "external"]
DeviceKind = Literal["cpu", "numanode", "socket", "machine", "memory"]
AttributeValue = bool | int | str | tuple[str, ...]


@dataclass(frozen=True, slots=True)
class NodeAllocatableMapping:
    """resource.k8s.io/v1 NodeAllocatableResource mapping onto a node resource (`cpu`,
    `memory`, `hugepages-<size>`)."""

    capacity_key: str = ""
    capacity_multiplier: str = ""
    device_multiplier: str = ""


@dataclass(frozen=True)
class Device:
    name: str
    kind: DeviceKind
    cpus: CPUSet
    attributes: Mapping[str, AttributeValue]
    capacity: Mapping[str, str] = field(default_factory=dict)
    allow_multiple_allocations: bool = False
    node_allocatable: Mapping[str, NodeAllocatableMapping] = field(default_factory=dict)

    @property
    def uses_list_attributes(self) -> bool:
        return any(isinstance(value, tuple) for value in self.attributes.values())


@dataclass(frozen=True)
class DeviceOptions:
    """The configuration that shapes the devices."""

    mode: Mode = "grouped"
    group_by: GroupBy = "numanode"
    # external: a scheduler plugin picks each claim's CPUs (`cpuConfig.cpuset`) and reads them
    # off the grouped devices' CPU list and SMT layout attributes (domain.external).
    # None: the grouping's only choice for machine, cpumanager otherwise (the configuration
    # always names it).
    allocator: Allocator | None = None
    reserved: CPUSet = field(default_factory=CPUSet)
    expose_pcie_roots: bool = False
    node_allocatable_mapping: bool = False
    # CPUs that are never published, so the shared pool keeps at least this many (the
    # configuration's minSharedCPUs, default 1; 0 here keeps the pure model's tests terse).
    min_shared: int = 0
    # The memory placement of claims whose opaque configuration does not choose one.
    memory_placement: MemoryPlacement = "none"
    # publishMemoryDevices: a memory device per NUMA node with memory, after the CPU devices.
    publish_memory: bool = False

    def __post_init__(self) -> None:
        if self.allocator is None:
            chosen = "external" if self.group_by == "machine" else "cpumanager"
            object.__setattr__(self, "allocator", chosen)
        if self.mode == "grouped" and self.group_by == "machine" and self.allocator != "external":
            # The configuration refuses this at start; the model holds to the same rule.
            raise ConfigError("groupBy 'machine' needs allocator 'external'")


@dataclass(frozen=True)
class DeviceModel:
    options: DeviceOptions
    devices: tuple[Device, ...]  # in device-number order
    # Every unreserved online CPU in individual device-number order (SMT siblings together).
    order: tuple[int, ...] = ()

    @cached_property
    def by_name(self) -> Mapping[str, Device]:
        return {d.name: d for d in self.devices}

    @property
    def mode(self) -> Mode:
        return self.options.mode

    @property
    def group_by(self) -> str:
        return "" if self.options.mode == "individual" else self.options.group_by

    @property
    def external(self) -> bool:
        """Whether claims bring their CPUs (`cpuConfig.cpuset`) rather than have them placed."""
        return self.options.mode == "grouped" and self.options.allocator == "external"

    @cached_property
    def uses_list_attributes(self) -> bool:
        return any(d.uses_list_attributes for d in self.devices)

    @cached_property
    def fingerprint(self) -> str:
        """Changes whenever any published fact of any device changes."""
        document = [
            {
                "name": d.name,
                "cpus": d.cpus.format(),
                "attributes": {
                    k: list(v) if isinstance(v, tuple) else v
                    for k, v in sorted(d.attributes.items())
                },
                "capacity": dict(sorted(d.capacity.items())),
                "multiple": d.allow_multiple_allocations,
                "allocatable": {
                    k: [m.capacity_key, m.capacity_multiplier, m.device_multiplier]
                    for k, m in d.node_allocatable.items()
                },
            }
            for d in self.devices
        ]
        text = json.dumps([self.options.mode, self.group_by, document], sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def build_devices(
    machine: Machine, options: DeviceOptions, withheld: CPUSet | None = None
) -> DeviceModel:
    """The devices of the machine. `withheld` CPUs are left out of what is published (the
    shared-pool floor, CPUs held by claims the scheduler cannot see on these devices): an
    individual CPU's device is omitted, a group's CPUs and capacity shrink, and a group left
    with none is omitted. Names never move: the individual devices number every unreserved CPU."""
    held = withheld if withheld is not None else CPUSet()
    order = individual_order(machine, options.reserved)
    if options.mode == "individual":
        devices = _individual(machine, options, held, order)
    else:
        devices = _grouped(machine, options, held)
    if options.publish_memory:
        devices.extend(memory_devices(machine, options.node_allocatable_mapping))
    return DeviceModel(options=options, devices=tuple(devices), order=tuple(order))


def individual_order(machine: Machine, reserved: CPUSet) -> list[int]:
    """Allocatable CPUs in device-number order: cores ordered by their first allocatable CPU,
    the core's threads next to each other, so the scheduler's first-fit keeps SMT siblings
    together (reference: cpuDeviceInfos)."""
    groups: dict[int, list[int]] = {}
    for cpu in machine.cpus:
        if cpu.cpu_id in reserved:
            continue
        groups.setdefault(cpu.physical_core_index, []).append(cpu.cpu_id)
    ordered = sorted(groups.values(), key=lambda members: members[0])
    return [cpu for members in ordered for cpu in members]


def _pcie_roots(
    machine: Machine, cpus: CPUSet, options: DeviceOptions
) -> dict[str, AttributeValue]:
    if not options.expose_pcie_roots:
        return {}
    roots: set[str] = set()
    for cpu in cpus:
        info = machine.by_id.get(cpu)
        if info is not None:
            roots.update(info.pcie_roots)
    return {ATTR_PCIE_ROOT: tuple(sorted(roots))} if roots else {}


def _individual(
    machine: Machine, options: DeviceOptions, withheld: CPUSet, order: list[int]
) -> list[Device]:
    allocatable = (
        {"cpu": NodeAllocatableMapping(device_multiplier="1")}
        if options.node_allocatable_mapping
        else {}
    )
    devices = []
    for number, cpu_id in enumerate(order):
        if cpu_id in withheld:
            continue
        cpu = machine.by_id[cpu_id]
        attributes: dict[str, AttributeValue] = {
            ATTR_NUMA_NODE: cpu.numa_node_id,
            ATTR_SOCKET_ID: cpu.socket_id,
            ATTR_SMT_ENABLED: machine.smt_enabled,
            ATTR_CACHE_L3_ID: cpu.uncore_cache_id,
            ATTR_CORE_TYPE: cpu.core_type,
            ATTR_CORE_ID: cpu.core_id,
            ATTR_CPU_ID: cpu.cpu_id,
            ATTR_LEGACY_NET_NUMA_NODE: cpu.numa_node_id,
            ATTR_LEGACY_NUMA_NODE_ID: cpu.numa_node_id,
            ATTR_ISOLATED: cpu_id in machine.isolated,
            ATTR_NOHZ_FULL: cpu_id in machine.nohz_full,
        }
        attributes.update(_pcie_roots(machine, CPUSet([cpu_id]), options))
        devices.append(
            Device(
                name=individual_device_name(number),
                kind="cpu",
                cpus=CPUSet([cpu_id]),
                attributes=attributes,
                node_allocatable=allocatable,
            )
        )
    return devices


def _grouped(machine: Machine, options: DeviceOptions, withheld: CPUSet) -> list[Device]:
    allocatable = (
        {"cpu": NodeAllocatableMapping(capacity_key=CPU_CAPACITY, capacity_multiplier="1")}
        if options.node_allocatable_mapping
        else {}
    )
    smt = machine.smt_enabled
    devices = []
    layout = ""
    if options.allocator == "external":
        layout = external.smt_layout(machine, _first_group(machine, options))

    def group(
        name: str, kind: DeviceKind, cpus: CPUSet, attributes: dict[str, AttributeValue]
    ) -> Device:
        attributes.update(_pcie_roots(machine, cpus, options))
        if layout:
            attributes[ATTR_SMT_LAYOUT] = external.checked(name, ATTR_SMT_LAYOUT, layout)
            attributes[ATTR_CPU_IDS] = external.checked(name, ATTR_CPU_IDS, cpus.format())
        attributes[ATTR_NUM_ISOLATED_CPUS] = len(cpus & machine.isolated)
        attributes[ATTR_NUM_NOHZ_FULL_CPUS] = len(cpus & machine.nohz_full)
        return Device(
            name=name,
            kind=kind,
            cpus=cpus,
            attributes=attributes,
            capacity={CPU_CAPACITY: str(len(cpus))},
            allow_multiple_allocations=True,
            node_allocatable=allocatable,
        )

    if options.group_by == "numanode":
        for node, members in machine.numa_nodes.items():
            cpus = members - options.reserved - withheld
            if not cpus:
                continue
            socket = machine.by_id[cpus.first()].socket_id
            attributes: dict[str, AttributeValue] = {
                ATTR_NUMA_NODE: node,
                ATTR_SOCKET_ID: socket,
                ATTR_SMT_ENABLED: smt,
                ATTR_NUM_CPUS: len(cpus),
                ATTR_LEGACY_NET_NUMA_NODE: node,
                ATTR_LEGACY_NUMA_NODE_ID: node,
            }
            devices.append(group(numa_device_name(node), "numanode", cpus, attributes))
    elif options.group_by == "socket":
        for socket, members in machine.sockets.items():
            cpus = members - options.reserved - withheld
            if not cpus:
                continue
            attributes = {ATTR_SOCKET_ID: socket, ATTR_NUM_CPUS: len(cpus), ATTR_SMT_ENABLED: smt}
            devices.append(group(socket_device_name(socket), "socket", cpus, attributes))
    else:
        # The whole machine is the kernel's online set (as the reference publishes it).
        cpus = machine.online - options.reserved - withheld
        if cpus:
            attributes = {ATTR_SMT_ENABLED: smt, ATTR_NUM_CPUS: len(cpus)}
            devices.append(group(MACHINE_DEVICE, "machine", cpus, attributes))
    return devices


def memory_devices(machine: Machine, node_allocatable_mapping: bool = False) -> list[Device]:
    """One device per NUMA node with memory: its memory outside the hugepage pools and each
    pool, in bytes, as consumable capacity. A node without memory (MemTotal 0) has no device,
    nor has one whose MemTotal could not be read (the inventory says why): every memory device
    has the memory capacity, which is what the DeviceClasses tell memory and CPUs apart by.

    With `node_allocatable_mapping` each capacity maps byte for byte onto the node resource
    the kubelet accounts the same memory under (`memory`, `hugepages-<size>`), so that the
    scheduler counts what a claim consumes against the node's allocatable once."""
    devices = []
    for memory in machine.memory:
        regular = memory.regular_bytes
        if regular is None or not memory.mem_total_kib:
            continue
        capacity = {MEMORY_CAPACITY: binary_quantity(regular)}
        resources = {"memory": MEMORY_CAPACITY}
        for pool in memory.hugepages:
            key = hugepages_capacity(pool.size_name)
            capacity[key] = binary_quantity(pool.total_bytes)
            resources[f"hugepages-{pool.size_name}"] = key
        allocatable = (
            {
                resource: NodeAllocatableMapping(capacity_key=key, capacity_multiplier="1")
                for resource, key in resources.items()
            }
            if node_allocatable_mapping
            else {}
        )
        devices.append(
            Device(
                name=memory_device_name(memory.node),
                kind="memory",
                cpus=CPUSet(),
                attributes={ATTR_NUMA_NODE: memory.node},
                capacity=capacity,
                allow_multiple_allocations=True,
                node_allocatable=allocatable,
            )
        )
    return devices


def _first_group(machine: Machine, options: DeviceOptions) -> str:
    """The name of the first group device, for errors about a node-wide attribute."""
    if options.group_by == "numanode":
        return numa_device_name(min(machine.numa_nodes, default=0))
    if options.group_by == "socket":
        return socket_device_name(min(machine.sockets, default=0))
    return MACHINE_DEVICE


def group_span(machine: Machine, device: Device) -> CPUSet:
    """Every online CPU of a grouped device's NUMA node, socket or machine, the reserved and
    withheld ones included: where an external allocator's cpuset must lie."""
    if device.kind == "machine":
        return machine.online
    if device.kind in ("numanode", "socket"):
        # The device's own CPUs name its group: every one is of the same node or socket.
        first = machine.by_id[device.cpus.first()]
        if device.kind == "numanode":
            return machine.numa_nodes[first.numa_node_id]
        return machine.sockets[first.socket_id]
    return device.cpus
