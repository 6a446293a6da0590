"""Kill -9 the allocator at random points of a prepare/unprepare loop, restart it, and check
that every acknowledged operation survived and that no CPU is in two claims (on the wire and
in the CDI specs the runtime would read)."""

from __future__ import annotations

import asyncio
import json
import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from allocator_process import Launcher, kill_and_wait, spawn, stop
from harness.requests import prepare_request
from harness.services import wait_serving

from dracpu.allocator.store import cdi, records
from dracpu.core.cpuset import CPUSet
from dracpu.core.errors import StateError
from dracpu.core.machine import Machine
from dracpu.core.rpc import channel
from dracpu.pb.allocator.v1 import allocator_pb2 as pb
from dracpu.pb.allocator.v1 import allocator_pb2_grpc

Machines = Callable[[str], Machine]
ITERATIONS = int(os.environ.get("DRACPU_CRASH_ITERATIONS", "100"))
RESERVED = CPUSet.parse("0,20")


class Model:
    """What the client was told: acknowledged claims, and the one operation in doubt."""

    def __init__(self) -> None:
        self.claims: dict[str, CPUSet] = {}
        self.released: set[str] = set()
        self.in_doubt: list[tuple[str, Any]] = []  # (kind, request) of operations cut short


async def run_op(stub: Any, model: Model, kind: str, request: Any) -> None:
    if kind == "prepare":
        try:
            reply = await stub.Prepare(request, timeout=10)
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                return  # acknowledged refusal: nothing recorded
            raise
        model.claims[request.claim_uid] = CPUSet.parse(reply.claim.cpus)
        model.released.discard(request.claim_uid)
    else:
        await stub.Unprepare(request, timeout=10)
        model.claims.pop(request.claim_uid, None)
        model.released.add(request.claim_uid)


def next_op(rng: random.Random, model: Model, counter: list[int]) -> tuple[str, Any]:
    if model.claims and (len(model.claims) > 6 or rng.random() < 0.45):
        uid = rng.choice(sorted(model.claims))
        return "unprepare", pb.UnprepareRequest(claim_uid=uid)
    return prepare_op(rng, counter)


def prepare_op(rng: random.Random, counter: list[int]) -> tuple[str, Any]:
    counter[0] += 1
    uid, device = f"c{counter[0]:04d}", rng.choice(["cpudevnuma000", "cpudevnuma001"])
    count = rng.randint(1, 5)
    return "prepare", prepare_request(uid, count, device=device, namespace="crash", name=uid)


async def check_after_restart(stub: Any, model: Model, cdi_dir: Path, state_dir: Path) -> None:
    # Operations cut short are retried, as the kubelet would; then they are acknowledged.
    for kind, request in model.in_doubt:
        await run_op(stub, model, kind, request)
    model.in_doubt = []
    listed = {
        c.uid: CPUSet.parse(c.cpus) for c in (await stub.ListClaims(pb.ListClaimsRequest())).claims
    }
    assert listed == model.claims, "acknowledged state differs after restart"
    seen = CPUSet()
    for cpus in listed.values():
        assert cpus.isdisjoint(seen) and cpus.isdisjoint(RESERVED)
        seen = seen | cpus
    specs = {}
    for spec in cdi.read_specs(cdi_dir):
        assert not isinstance(spec, StateError), spec
        specs[spec.uid] = spec.cpus
    assert specs == listed, "CDI specs on disk differ from the claims"
    # Temp files of writes cut short are cleaned up at start, and every claim record is
    # trusted (none set aside as corrupt).
    assert [p.name for p in cdi_dir.iterdir() if not p.name.endswith(".json")] == []
    claims_dir = records.claims_dir(state_dir)
    assert sorted(p.name for p in claims_dir.iterdir()) == sorted(f"{u}.json" for u in listed)


@pytest.mark.slow
async def test_kill_9_loses_nothing_acknowledged(short_tmp: Path, machines: Machines) -> None:
    rng = random.Random(int(os.environ.get("DRACPU_CRASH_SEED", "20261129")))
    report = short_tmp / "topo.json"
    report.write_text(json.dumps({"cpus": machines("xeon-2s-ht").to_report_cpus()}))
    socket = short_tmp / "a.sock"
    args = [
        "--socket", str(socket),
        "--state-dir", str(short_tmp / "state"),
        "--cdi-dir", str(short_tmp / "cdi"),
        "--topology-file", str(report),
        "--reserved-cpus", "0,20",
    ]  # fmt: skip
    model = Model()
    counter = [0]
    kills_in_flight = 0
    launcher = Launcher()
    try:
        for _ in range(ITERATIONS):
            pid = launcher.start(args, short_tmp / "allocator.log")
            try:
                await crash_once(rng, pid, socket, short_tmp, model, counter)
            except InDoubtError:
                kills_in_flight += 1
            finally:
                kill_and_wait(pid)
    finally:
        launcher.close()
    # The final restart runs the real entry point in a fresh interpreter.
    process = spawn("dracpu.allocator.main", args, short_tmp / "allocator.log")
    try:
        await wait_serving(socket, process, what="the allocator", timeout=20, interval=0.02)
        async with channel(socket) as chan:
            await check_after_restart(
                allocator_pb2_grpc.AllocatorStub(chan),
                model,
                short_tmp / "cdi",
                short_tmp / "state",
            )
    finally:
        stop(process)
    # The loop must really have cut operations short, or it proves nothing.
    print(f"{kills_in_flight} of {ITERATIONS} kills landed while an operation was in flight")
    assert kills_in_flight >= ITERATIONS // 10


class InDoubtError(Exception):
    """The kill landed while an operation was in flight."""


async def crash_once(
    rng: random.Random, pid: int, socket: Path, base: Path, model: Model, counter: list[int]
) -> None:
    """Restart check, a few operations, then SIGKILL at a random moment of one more (or of
    a few concurrent prepares)."""
    await wait_serving(socket, pid, what="the allocator", timeout=20, interval=0.02)
    async with channel(socket) as chan:
        stub = allocator_pb2_grpc.AllocatorStub(chan)
        await check_after_restart(stub, model, base / "cdi", base / "state")
        for _ in range(rng.randint(0, 4)):
            await run_op(stub, model, *next_op(rng, model, counter))
        ops = [next_op(rng, model, counter)]
        if ops[0][0] == "prepare" and rng.random() < 0.4:
            # Concurrent prepares are written together (group commit): cut such a batch too.
            ops += [prepare_op(rng, counter) for _ in range(rng.randint(1, 3))]
        tasks = [asyncio.ensure_future(run_op(stub, model, *op)) for op in ops]
        # The kill lands anywhere: before the request arrives, during the operation's file
        # I/O, or after the answer; short delays are favoured so fast disks still get hit.
        await asyncio.sleep(rng.choice((0.0, rng.uniform(0, 0.002), rng.uniform(0, 0.008))))
        kill_and_wait(pid)
        results = await asyncio.gather(*tasks, return_exceptions=True)
        for op, result in zip(ops, results, strict=True):
            if isinstance(result, grpc.aio.AioRpcError):
                model.in_doubt.append(op)
            elif isinstance(result, BaseException):
                raise result
        if model.in_doubt:
            raise InDoubtError
