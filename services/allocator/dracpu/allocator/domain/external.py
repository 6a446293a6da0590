"""The attributes an external allocator reads on grouped devices (`allocator: external`).

- `dra.cpu/cpuIDs`: the Linux CPU list of the group's allocatable CPUs (`0-3,8-11`), the CPUs
  the allocator may write in a claim's `cpuConfig.cpuset` for that device.
- `dra.cpu/smtLayout`: the node's SMT sibling pairs in the V1 encoding (the unversioned name
  means V1): `;`-joined entries `cpuset>stride`, one per stride, each the CPUs of every core
  whose two threads are `stride` apart, ordered by their lowest CPU, then one entry `cpuset`
  of the CPUs without a sibling. `0-7>4;8-11>2;12-15` is cores {0,4} {1,5} {2,6} {3,7}
  {8,10} {9,11} and CPUs 12-15 alone. The entries cover every online CPU of the node.
  Decoding pairs the lowest CPU left in an entry with the one `stride` above it, repeatedly.

A value that V1 cannot express (a core with 3 or more threads) or that is longer than the API
server accepts for a string attribute is refused with a ConfigError naming the device: never a
truncated or wrong attribute.
"""

from __future__ import annotations

from dracpu.core.cpuset import CPUSet
from dracpu.core.errors import ConfigError
from dracpu.core.machine import Machine
from dracpu.core.names import MAX_ATTRIBUTE_VALUE

ATTR_CPU_IDS = "dra.cpu/cpuIDs"
ATTR_SMT_LAYOUT = "dra.cpu/smtLayout"


def smt_layout(machine: Machine, device: str) -> str:
    """The V1 encoding of the node's SMT layout; `device` names the group in errors."""
    by_stride: dict[int, int] = {}
    paired = 0
    for threads in machine.cores.values():
        if len(threads) > 2:
            raise ConfigError(
                f"device {device}: {ATTR_SMT_LAYOUT}: the V1 encoding covers 2-way SMT only, "
                f"CPUs {threads.format()} are {len(threads)} threads of one core"
            )
        if len(threads) == 2:
            low, high = threads.sorted()
            by_stride[high - low] = by_stride.get(high - low, 0) | threads.mask
            paired |= threads.mask
    # By lowest CPU, as the reference's own example orders them (`0-7>4;8-11>2;12-15`).
    strided = sorted(by_stride.items(), key=lambda item: item[1] & -item[1])
    entries = [f"{CPUSet.from_mask(mask).format()}>{stride}" for stride, mask in strided]
    alone = (machine.online | machine.cpu_set) - CPUSet.from_mask(paired)
    if alone:
        entries.append(alone.format())
    return ";".join(entries)


def decode_smt_layout(text: str) -> tuple[list[tuple[int, int]], CPUSet]:
    """The sibling pairs and the CPUs without a sibling of a V1 `dra.cpu/smtLayout` value (what
    an external allocator does with it); raises ConfigError on a malformed value."""
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


def checked(device: str, attribute: str, value: str) -> str:
    """`value` if the API server accepts it as a string attribute, else a ConfigError."""
    if len(value) > MAX_ATTRIBUTE_VALUE:
        raise ConfigError(
            f"device {device}: {attribute} would be {len(value)} characters, over the API "
            f"server's limit of {MAX_ATTRIBUTE_VALUE} for an attribute value ({value[:24]}...)"
        )
    return value
