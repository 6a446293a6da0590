"""Hypothesis strategies for the allocator's claim records (claims.model.ClaimRecord): every
field drawn, with names as the API server allows them and cpusets as the kernel writes them."""

from __future__ import annotations

import string
from typing import Any

from hypothesis import strategies as st

from dracpu.allocator.claims import Allocation, ClaimRecord
from dracpu.allocator.claims.model import MemoryAmount
from dracpu.core.containers import Owner
from dracpu.core.cpuset import CPUSet

# DNS labels and UIDs, built from their alphabets (cheaper to draw than from a regex).
labels = st.builds(
    str.__add__, st.sampled_from(string.ascii_lowercase),
    st.text(string.ascii_lowercase + string.digits, max_size=11),
)  # fmt: skip
uids = st.builds(
    "{}-{}".format, st.text("0123456789abcdef", min_size=8, max_size=8),
    st.text("0123456789abcdef", min_size=4, max_size=4),
)  # fmt: skip
cpusets = st.frozensets(st.integers(0, 511), max_size=24).map(CPUSet)
allocations = st.builds(
    Allocation,
    request=labels,
    pool=labels,
    device=labels,
    cpus=cpusets,
    count=st.integers(0, 64),
    policy=st.sampled_from(["", "packed", "spread", "explicit"]),
)
owners = st.builds(
    Owner,
    pod_uid=uids,
    container_name=labels,
    pod_namespace=st.just("") | labels,
    pod_name=st.just("") | labels,
)
memory_amounts = st.builds(
    MemoryAmount,
    node=st.integers(0, 7),
    kind=st.sampled_from(["memory", "hugepages-2Mi", "hugepages-1Gi"]),
    bytes=st.integers(0, 2**40),
)


@st.composite
def claim_records(draw: Any) -> ClaimRecord:
    pods_known = draw(st.booleans())
    return ClaimRecord(
        uid=draw(uids),
        namespace=draw(labels),
        name=draw(labels),
        cpus=draw(cpusets),
        allocations=tuple(draw(st.lists(allocations, max_size=3))),
        prepared_at_ns=draw(st.integers(0, 2**63 - 1)),
        owner=draw(st.none() | owners),
        container_id=draw(st.just("") | st.text("0123456789abcdef", min_size=12, max_size=12)),
        recovered=draw(st.booleans()),
        pods=tuple(draw(st.lists(uids, max_size=3))) if pods_known else (),
        pods_known=pods_known,
        memory_nodes=draw(st.frozensets(st.integers(0, 7), max_size=3).map(CPUSet)),
        memory=tuple(draw(st.lists(memory_amounts, max_size=3))),
        shares_pool=draw(st.booleans()),
    )
