"""A machine's topology in the terms a placement uses, the same on the host (a fixture's sysfs
tree) and in the guest (the real kernel's /sys), so the two compare as plain data."""

from __future__ import annotations

from typing import Any

from dracpu.topology.discovery import discover


def machine_shape(sysfs: str) -> dict[str, Any]:
    """Online CPUs and, per CPU, socket, core, NUMA node, SMT siblings and the node's CPUs, as
    the driver's topology discovery reads them from the tree at `sysfs`."""
    machine = discover(sysfs)
    return {
        "online": machine.online.format(),
        "cpus": [
            {
                "cpu": c.cpu_id,
                "socket": c.socket_id,
                "core": c.core_id,
                "numa": c.numa_node_id,
                "siblings": c.siblings.format(),
                "numa_cpus": c.numa_node_cpus.format(),
                "physical_core": c.physical_core_index,
            }
            for c in machine.cpus
        ],
    }
