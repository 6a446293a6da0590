"""The attributes an external allocator reads on grouped devices (`allocator: external`); their
names are core.driver's.

- `ATTR_CPU_IDS`: the Linux CPU list of the group's allocatable CPUs (`0-3,8-11`), the CPUs
  the allocator may write in a claim's `cpuConfig.cpuset` for that device.
- `ATTR_SMT_LAYOUT`: the node's SMT sibling pairs in the V1 encoding (the unversioned name
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
from dracpu.core.driver import ATTR_SMT_LAYOUT
from dracpu.core.errors import ConfigError
from dracpu.core.machine import Machine
from dracpu.core.names import MAX_ATTRIBUTE_VALUE


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


def checked(device: str, attribute: str, value: str) -> str:
    """`value` if the API server accepts it as a string attribute, else a ConfigError."""
    if len(value) > MAX_ATTRIBUTE_VALUE:
        raise ConfigError(
            f"device {device}: {attribute} would be {len(value)} characters, over the API "
            f"server's limit of {MAX_ATTRIBUTE_VALUE} for an attribute value ({value[:24]}...)"
        )
    return value
