"""The facts every service and tool of the driver agrees on, defined once.

- `DRIVER_NAME`: the DRA driver name. It names the DeviceClass, the ResourceSlices' driver,
  the kubelet plugin directories, the NRI plugin and the opaque-config driver.
- The published devices: their names (one builder per kind of device), the CPU capacity a
  grouped device offers and a claim consumes, the memory and hugepage capacities of a memory
  device, and the names of their attributes and of the
  attributes of the device metadata a prepared claim's containers read. These are API: claims,
  CEL selectors and external allocators spell them, so they never change.
- The CDI device of a prepared claim: kind `dra.k8s.io/cpu`, device `claim-<uid>`, named
  in the kubelet's answer and resolved by the runtime.
- The env contract of the CDI specs: a prepared claim's spec injects
  `DRA_CPUSET_<claimUID>=<cpuset>` into each container that holds the claim; the nri-plugin
  and the dev tools read it back.
"""

from __future__ import annotations

from typing import Final

DRIVER_NAME: Final = "dra.cpu"

# The capacity of a grouped device, in CPUs; a claim's result consumes part of it.
CPU_CAPACITY: Final = "dra.cpu/cpu"
# The capacities of a memory device (publishMemoryDevices), in bytes: the NUMA node's memory
# outside its hugepage pools, and one per hugepage pool, named for its page size as the
# kubelet names the node resource `hugepages-<size>`, without the dash: the API server takes
# only a C identifier after the domain (dra.cpu/hugepages2Mi, dra.cpu/hugepages1Gi).
MEMORY_CAPACITY: Final = "dra.cpu/memory"
HUGEPAGES_CAPACITY_PREFIX: Final = "dra.cpu/hugepages"


def hugepages_capacity(size_name: str) -> str:
    """The capacity of the hugepage pool of pages of `size_name` (2Mi, 1Gi, 64Ki)."""
    return f"{HUGEPAGES_CAPACITY_PREFIX}{size_name}"


# What a claim holds of a memory device is counted per kind: `memory`, or `hugepages-<size>`
# as the kubelet names the node resource (hugepages-2Mi).
MEMORY_KIND: Final = "memory"


def memory_kind(capacity: str) -> str | None:
    """`dra.cpu/memory` -> `memory`, `dra.cpu/hugepages2Mi` -> `hugepages-2Mi`; None for a
    capacity a memory device does not have."""
    if capacity == MEMORY_CAPACITY:
        return MEMORY_KIND
    size = capacity.removeprefix(HUGEPAGES_CAPACITY_PREFIX)
    if size != capacity and size:
        return f"hugepages-{size}"
    return None


def memory_capacity(kind: str) -> str:
    """The memory device's capacity of `kind`: the inverse of `memory_kind`."""
    if kind == MEMORY_KIND:
        return MEMORY_CAPACITY
    return hugepages_capacity(kind.removeprefix("hugepages-"))


def memory_bytes_attribute(kind: str) -> str:
    """The device-metadata attribute of the bytes a claim holds of `kind`, summed over its
    NUMA nodes: dra.cpu/memoryBytes, dra.cpu/hugepages2MiBytes."""
    return memory_capacity(kind) + "Bytes"


# Device attributes (the reference driver's attribute tables, pkg/device/builder.go).
ATTR_NUMA_NODE: Final = "resource.kubernetes.io/numaNode"
ATTR_PCIE_ROOT: Final = "resource.kubernetes.io/pcieRoot"
ATTR_SOCKET_ID: Final = "dra.cpu/socketID"
ATTR_SMT_ENABLED: Final = "dra.cpu/smtEnabled"
ATTR_NUM_CPUS: Final = "dra.cpu/numCPUs"
ATTR_CACHE_L3_ID: Final = "dra.cpu/cacheL3ID"
ATTR_CORE_TYPE: Final = "dra.cpu/coreType"
ATTR_CORE_ID: Final = "dra.cpu/coreID"
ATTR_CPU_ID: Final = "dra.cpu/cpuID"
# Kernel CPU isolation: a bool per CPU (individual mode), a count per group (grouped modes).
ATTR_ISOLATED: Final = "dra.cpu/isolated"
ATTR_NOHZ_FULL: Final = "dra.cpu/nohzFull"
ATTR_NUM_ISOLATED_CPUS: Final = "dra.cpu/numIsolatedCPUs"
ATTR_NUM_NOHZ_FULL_CPUS: Final = "dra.cpu/numNohzFullCPUs"
# Published on grouped devices for an external allocator (`allocator: external`): the group's
# allocatable CPUs and the node's SMT sibling pairs (the encoding is the allocator's
# domain.external).
ATTR_CPU_IDS: Final = "dra.cpu/cpuIDs"
ATTR_SMT_LAYOUT: Final = "dra.cpu/smtLayout"
# Legacy attributes, kept for compatibility with claims written for older releases.
ATTR_LEGACY_NUMA_NODE_ID: Final = "dra.cpu/numaNodeID"
ATTR_LEGACY_NET_NUMA_NODE: Final = "dra.net/numaNode"
# Device metadata only (never published on a device): how many CPUs one grouped result
# received, and the memory nodes of a claim whose memory is placed (cpuset format).
ATTR_ALLOCATED_NUM_CPUS: Final = "dra.cpu/allocatedNumCPUs"
ATTR_MEMORY_NODES: Final = "dra.cpu/memoryNodes"

# Device names. Individual devices are numbered in device-number order, groups by their NUMA
# node or socket ID; the number has at least three digits. The machine device is the only one
# of its kind.
INDIVIDUAL_DEVICE_PREFIX: Final = "cpudev"
NUMA_DEVICE_PREFIX: Final = "cpudevnuma"
SOCKET_DEVICE_PREFIX: Final = "cpudevsocket"
MACHINE_DEVICE: Final = "cpudevmachine"
# A NUMA node's memory device (publishMemoryDevices): memory-node-<node>, as the kernel's
# node<N> directory numbers it.
MEMORY_DEVICE_PREFIX: Final = "memory-node-"


def individual_device_name(number: int) -> str:
    """The name of the individual CPU device numbered `number` (not the CPU's ID)."""
    return f"{INDIVIDUAL_DEVICE_PREFIX}{number:03d}"


def numa_device_name(node: int) -> str:
    """The name of the grouped device of NUMA node `node`."""
    return f"{NUMA_DEVICE_PREFIX}{node:03d}"


def socket_device_name(socket: int) -> str:
    """The name of the grouped device of socket `socket`."""
    return f"{SOCKET_DEVICE_PREFIX}{socket:03d}"


def memory_device_name(node: int) -> str:
    """The name of the memory device of NUMA node `node`."""
    return f"{MEMORY_DEVICE_PREFIX}{node}"


# The CDI kind of the claims' specs (vendor/class) and its devices, one per prepared claim.
CDI_VENDOR: Final = "dra.k8s.io"
CDI_CLASS: Final = "cpu"
CDI_KIND: Final = f"{CDI_VENDOR}/{CDI_CLASS}"


def cdi_device_name(uid: str) -> str:
    """The CDI device of claim `uid` within the kind: `claim-<uid>`."""
    return f"claim-{uid}"


def cdi_device_id(uid: str) -> str:
    """The fully qualified CDI device of claim `uid`, as the kubelet passes it to the runtime:
    `dra.k8s.io/cpu=claim-<uid>`."""
    return f"{CDI_KIND}={cdi_device_name(uid)}"


# Entries whose name starts with this matter to the nri-plugin (the reference driver's rule);
# a claim's own entry is `<CPUSET_ENV>_<uid>`.
CPUSET_ENV: Final = "DRA_CPUSET"


def cpuset_env_name(uid: str) -> str:
    """`DRA_CPUSET_<uid>`: the env variable that carries one claim's cpuset."""
    return f"{CPUSET_ENV}_{uid}"


def cpuset_env_entry(uid: str, cpuset: str) -> str:
    """`DRA_CPUSET_<uid>=<cpuset>`, as a CDI spec's containerEdits.env lists it."""
    return f"{cpuset_env_name(uid)}={cpuset}"


# `<SHARED_CPUSET_ENV>_<uid>`: the shared pool a container of a claim with
# `cpuConfig.sharedPool: include` was created with (the nri-plugin sets it; the pool moves
# afterwards, the container's cgroup follows, this variable does not).
SHARED_CPUSET_ENV: Final = "DRA_SHARED_CPUSET"


def shared_cpuset_env_name(uid: str) -> str:
    """`DRA_SHARED_CPUSET_<uid>`: the shared pool at the container's creation."""
    return f"{SHARED_CPUSET_ENV}_{uid}"


def claim_uid_of_env_name(name: str) -> str | None:
    """The claim UID a `DRA_CPUSET_<uid>` name carries; None for any other name."""
    uid = name.removeprefix(f"{CPUSET_ENV}_")
    if uid == name or not uid:
        return None
    return uid
