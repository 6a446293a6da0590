"""What the driver publishes, read back or reshaped as its consumers do: a DeviceList in
ResourceSlice-sized chunks, and the SMT layout attribute an external allocator decodes."""

from __future__ import annotations

from typing import Any

from dracpu.core.cpuset import CPUSet
from dracpu.core.driver import ATTR_SMT_LAYOUT
from dracpu.core.errors import ConfigError
from dracpu.dra_plugin.publishing.slices import chunk_documents, device_json
from dracpu.pb.allocator.v1 import allocator_pb2


def chunk_devices(devices: allocator_pb2.DeviceList) -> list[list[dict[str, Any]]]:
    """Devices in slice-sized chunks, in allocator order; an empty pool is one empty slice."""
    return chunk_documents([device_json(d) for d in devices.devices], devices.uses_list_attributes)


def decode_smt_layout(text: str) -> tuple[list[tuple[int, int]], CPUSet]:
    """The sibling pairs and the CPUs without a sibling of a V1 SMT layout attribute value
    (what an external allocator does with it); raises ConfigError on a malformed value."""
    pairs: list[tuple[int, int]] = []
    alone = CPUSet()
    for entry in text.split(";") if text else []:
        cpus_text, _, stride_text = entry.partition(">")
        cpus = CPUSet.parse(cpus_text)
        if not stride_text:
            alone = alone | cpus
            continue
        if not stride_text.isdigit() or int(stride_text) < 1:
            raise ConfigError(f"{ATTR_SMT_LAYOUT}: entry {entry!r}: bad stride")
        stride = int(stride_text)
        left = set(cpus)
        while left:
            low = min(left)
            if low + stride not in left:
                raise ConfigError(f"{ATTR_SMT_LAYOUT}: entry {entry!r}: CPU {low} has no sibling")
            left -= {low, low + stride}
            pairs.append((low, low + stride))
    return sorted(pairs), alone
