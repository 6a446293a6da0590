"""A kubelet unpreparing thousands of claims in one NodeUnprepareResources call (a node drained
at once): every claim is released, a call the allocator cannot finish within the kubelet's
deadline fails as "unavailable, try again" and the kubelet's next call finishes the work, and no
record or CDI spec of any of them is left. Real topology, allocator and dra-plugin processes on
a 3,072-CPU fixture; the kubelet stand-in makes the calls."""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from harness.dra_plugin_node import Node, claim, result

from dracpu.dev.kubelet_sim import Claim, KubeletSim, PrepareResult
from dracpu.topology.fixtures import MachineSpec, write_fixture

pytestmark = pytest.mark.timeout(300)

CLAIMS = 3000
NUMA_NODES = 8
PREPARE_BATCH = 500
# 2 sockets x 768 cores x 2 threads: 3,072 CPUs in 8 NUMA nodes of 384, room for 3,000
# one-CPU claims next to the shared pool.
MACHINE = MachineSpec(
    "3072 CPUs: 2 sockets x 768 cores with SMT, 8 NUMA nodes, L3 per 8 cores",
    sockets=2,
    cores_per_socket=768,
    threads_per_core=2,
    numa_per_socket=NUMA_NODES // 2,
    cores_per_l3=8,
)


@pytest.fixture(scope="module")
def huge_sysfs() -> Iterator[Path]:
    # Tens of thousands of small files the services only read: written to memory where there is a
    # tmpfs (several times faster than a disk-backed /tmp), the claims' files stay on /tmp.
    shm = Path("/dev/shm")
    root = Path(tempfile.mkdtemp(prefix="dphuge", dir=shm if shm.is_dir() else None))
    try:
        yield write_fixture(MACHINE, root / "sys")
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def node(huge_sysfs: Path) -> Iterator[Node]:
    made = Node(sysfs=huge_sysfs)
    made.configure(groupBy="numanode")
    try:
        yield made
    finally:
        made.close()


def write_claims(node: Node, count: int) -> list[Claim]:
    """`count` allocated one-CPU claims spread over the NUMA nodes' devices, in the API
    server the dra-plugin reads."""
    made = []
    for i in range(count):
        name, uid = f"batch-{i:04d}", str(uuid.uuid4())
        device = f"cpudevnuma{i % NUMA_NODES:03d}"
        document = claim(name, uid, [result(device, cpus=1)])
        node.write_claim(document)
        made.append(Claim("default", name, uid))
    return made


def leftovers(node: Node, claims: list[Claim]) -> list[str]:
    uids = {c.uid for c in claims}
    on_disk = [p.name for p in node.cdi.glob("*") if any(u in p.name for u in uids)]
    records = node.state / "claims"
    if records.is_dir():
        on_disk += [p.name for p in records.iterdir() if any(u in p.name for u in uids)]
    return on_disk


async def prepare_as_the_kubelet_does(
    plugin: KubeletSim, batch: list[Claim]
) -> dict[str, PrepareResult]:
    """NodePrepareResources of `batch` with the kubelet's deadline; a call that fails for time
    (UNAVAILABLE from the plugin, or the deadline itself on a busy machine) is made again, as
    the kubelet's next sync of the pods does. Prepare is idempotent: claims the failed call
    prepared are answered again with the same CPUs."""
    while True:
        try:
            return await plugin.prepare(batch)
        except grpc.aio.AioRpcError as exc:
            again = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
            assert exc.code() in again, f"{exc.code().name}: {exc.details()}"
            print(f"prepare of {len(batch)} claims: {exc.code().name}, again")


async def unprepare_as_the_kubelet_does(
    plugin: KubeletSim, node: Node, claims: list[Claim]
) -> tuple[dict[str, str], list[str]]:
    """NodeUnprepareResources of every claim, each call with the kubelet's deadline; a call that
    fails UNAVAILABLE ("try again"), or on a busy machine the deadline itself, is made again, as
    the kubelet's next sync does. Each failed call must have released some of the claims.
    (per-claim errors, the failed calls' details)"""
    cut_short: list[str] = []
    left = len(leftovers(node, claims))
    while True:
        try:
            return await plugin.unprepare(claims), cut_short
        except grpc.aio.AioRpcError as exc:
            details = exc.details() or ""
            again = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
            assert exc.code() in again, f"{exc.code().name}: {details}"
            if exc.code() == grpc.StatusCode.UNAVAILABLE:  # the plugin's own answer, in time
                assert "allocator" in details and "try again" in details, details
            cut_short.append(details)
            now = len(leftovers(node, claims))
            assert now < left, f"an unprepare cut short released nothing: {details}"
            left = now


async def test_three_thousand_claims_unprepared_in_one_call(node: Node) -> None:
    await node.start()
    claims = write_claims(node, CLAIMS)
    plugin = await KubeletSim(node.kubelet_root).register("dra.cpu", timeout=30)
    try:
        for start in range(0, CLAIMS, PREPARE_BATCH):
            batch = claims[start : start + PREPARE_BATCH]
            prepared = await prepare_as_the_kubelet_does(plugin, batch)
            failed = {uid: r.error for uid, r in prepared.items() if r.error}
            assert not failed, f"{len(failed)} prepares failed, e.g. {next(iter(failed.items()))}"
        assert len(list(node.cdi.glob("*.json"))) >= CLAIMS

        errors, cut_short = await unprepare_as_the_kubelet_does(plugin, node, claims)
    finally:
        await plugin.close()
    print(f"unprepare of {CLAIMS} claims: {len(cut_short) + 1} call(s); cut short: {cut_short}")
    failed = {uid: e for uid, e in errors.items() if e}
    assert not failed, (
        f"{len(failed)} of {CLAIMS} unprepares failed, e.g. {next(iter(failed.values()))}"
    )
    assert not leftovers(node, claims)
