"""The path one prepare takes through the allocator's modules, measured; and the claim's opaque
configuration parsed once, where the allocator receives the claim.

A typical claim (4 CPUs of a NUMA-node device, a configuration choosing the spread strategy,
reserved for one pod) is prepared through the allocator's servicer in-process, after one
prepare like it, and traced with sys.setprofile (`harness.module_path`, which says what an
entry and a return are). Only the allocator's own modules count: `dracpu.core.*` (the shared
plumbing) and the generated `dracpu.pb.*` messages do not, nor anything outside dracpu.

The path, in order: servicer, rpc.wire (the request checked and translated, its configuration
parsed in domain.opaque), live.batches (the lock and the batch), claims.preparation driving
claims.allocations (the node's facts read once from claims.state, the result's count from
core.quantity, what its configuration asks in one call to claims.rules, the CPUs from
domain.isolation and the algorithm), the claim's record (claims.model) and the new state
(claims.state), then the files (store.cdi's spec and store.records' record, written together
by store.durable in one thread-pool job), the publish (live.state, which reads the new state in
claims.state and saves its generations in store.records) and the reply (rpc.wire).

Its four returns: claims.state (read before the CPUs are chosen, a new state after), claims.state
again and store.records from the publish (what it reads of the state, then the generations it
saves), and rpc.wire (the request in, the reply out).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from harness.module_path import ModulePath, trace
from harness.requests import prepare_request

from dracpu.allocator.domain import opaque
from dracpu.allocator.domain.devices import DeviceOptions
from dracpu.allocator.live.node import NodeAllocator
from dracpu.allocator.servicer import AllocatorServicer
from dracpu.core.cpuset import CPUSet
from dracpu.core.machine import Machine
from dracpu.pb.allocator.v1 import allocator_pb2

Machines = Callable[[str], Machine]
POD = "7c1d2e3f-0000-4000-8000-0000000000a1"
SPREAD = {"strategy": "spread"}
MAX_MODULES = 20
MAX_RETURNS = 4
ALLOCATOR = "dracpu.allocator."


def typical(uid: str, **kw: Any) -> allocator_pb2.PrepareRequest:
    kw.setdefault("cpu_config", SPREAD)
    return prepare_request(uid, 4, device="cpudevnuma000", pods=[POD], **kw)


async def servicer_on(base: Path, machine: Machine) -> AllocatorServicer:
    node = NodeAllocator(
        state_dir=base / "state",
        cdi_dir=base / "cdi",
        options=DeviceOptions(reserved=CPUSet.parse("0,20"), min_shared=1),
    )
    await node.start(machine)
    return AllocatorServicer(node)


async def traced_prepare(base: Path, machine: Machine) -> ModulePath:
    servicer = await servicer_on(base, machine)
    await servicer.Prepare(typical("3f0a5e9c-1111-4222-8333-444455550000"), None)
    response, path = await trace(
        servicer.Prepare(typical("3f0a5e9c-1111-4222-8333-444455556666"), None)
    )
    assert len(CPUSet.parse(response.claim.cpus)) == 4 and response.claim.policy == "spread"
    return path


async def test_one_prepare_crosses_few_modules_and_seldom_returns(
    tmp_path: Path, machines: Machines
) -> None:
    path = await traced_prepare(tmp_path, machines("xeon-2s-ht"))
    assert all(m.startswith(ALLOCATOR) for m in path.modules), path.describe()
    assert len(path.modules) <= MAX_MODULES, path.describe()
    assert path.returns <= MAX_RETURNS, path.describe()


async def test_the_claim_rules_take_one_straight_path(tmp_path: Path, machines: Machines) -> None:
    """The claims layer is entered once and asks for each result's configuration once, of the
    rules; the configuration's module is entered only where the claim arrives, and the files
    are written in one go."""
    path = await traced_prepare(tmp_path, machines("xeon-2s-ht"))
    entered = [(e.module, e.function) for e in path.entries]
    assert [e for e in entered if e[0] == f"{ALLOCATOR}domain.opaque"] == [
        (f"{ALLOCATOR}domain.opaque", "parse_configs"),
    ], path.describe()
    assert [e for e in entered if e[0] == f"{ALLOCATOR}claims.rules"] == [
        (f"{ALLOCATOR}claims.rules", "request_config"),
    ], path.describe()
    for module in ("claims.preparation", "claims.allocations", "store.cdi", "store.durable"):
        assert path.entered(ALLOCATOR + module) == 1, path.describe()


async def test_the_opaque_config_is_parsed_once_per_claim_received(
    tmp_path: Path, machines: Machines, monkeypatch: pytest.MonkeyPatch
) -> None:
    parsed: list[bytes] = []
    parse = opaque.parse_parameters

    def counted(raw: bytes) -> opaque.ClaimParameters:
        parsed.append(raw)
        return parse(raw)

    monkeypatch.setattr(opaque, "parse_parameters", counted)
    servicer = await servicer_on(tmp_path, machines("xeon-2s-ht"))
    isolated = {"strategy": "spread", "isolated": "avoid", "memoryPlacement": "local"}
    request = typical("3f0a5e9c-1111-4222-8333-444455556666", cpu_config=isolated)
    first = await servicer.Prepare(request, None)
    assert len(parsed) == 1 and first.claim.policy == "spread+isolated-avoid"
    assert first.claim.memory_nodes == "0"
    again = await servicer.Prepare(request, None)
    assert len(parsed) == 2 and again.already_prepared  # once more: a new receipt


async def test_an_entry_no_rule_reads_is_never_refused(tmp_path: Path, machines: Machines) -> None:
    """Parsed where the claim arrives, a refused entry fails the prepare only where a rule
    needs it: one for another request, or a repeated prepare answered from the record, is
    never read."""
    servicer = await servicer_on(tmp_path, machines("xeon-2s-ht"))
    unread = allocator_pb2.OpaqueConfig(
        source="FromClaim", requests=["other"], driver="dra.cpu", parameters=b"not json"
    )
    request = typical("3f0a5e9c-1111-4222-8333-444455556666", configs=[unread])
    assert (await servicer.Prepare(request, None)).claim.policy == "spread"
    broken = typical("3f0a5e9c-1111-4222-8333-444455556666", cpu_config={"bogus": 1})
    assert (await servicer.Prepare(broken, None)).already_prepared
