"""Random lifecycles (seeded, reproducible) through the runtime stand-in, the plugin and the
real allocator; after every step the runtime's cpusets must obey the driver's invariants."""

from __future__ import annotations

import random

import pytest
from harness.nri_bed import ONLINE, Bed, claim_env
from harness.waits import eventually

from dracpu.core.cpuset import CPUSet
from dracpu.dev.runtime_sim import CONTAINERD_2_0, CreateContainerError, RuntimeProfile

STEPS = 40


async def check(bed: Bed, pinned: dict[str, CPUSet], settled: bool) -> None:
    """Pinned containers run on exactly their claim; nobody runs on an empty cpuset or off
    the machine; shared containers never overlap a claim that has a running owner; and once
    the plugin had its solicited chance, every shared container is on the allocator's pool."""
    pool = await bed.allocator.shared()
    owned = CPUSet()
    for cid, cpus in pinned.items():
        assert CPUSet.parse(bed.runtime.cpus(cid)) == cpus
        owned |= cpus
    for cid, text in bed.runtime.cpusets().items():
        cpus = CPUSet.parse(text)
        assert cpus and cpus.issubset(ONLINE), (cid, text)
        if cid not in pinned:
            assert cpus.isdisjoint(owned), (cid, text, owned)
            if settled:
                assert cpus == pool, (cid, text, pool)


@pytest.mark.parametrize(
    "profile",
    [
        pytest.param(RuntimeProfile(), id="containerd-2.4-unsolicited"),
        pytest.param(CONTAINERD_2_0, id="containerd-2.0-solicited-only"),
    ],
)
@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_random_lifecycles_keep_the_invariants(bed: Bed, seed: int) -> None:
    rng = random.Random(seed)
    pod = bed.runtime.add_pod("mixed")
    prepared: dict[str, CPUSet] = {}  # claim uid -> cpus, no running owner yet
    pinned: dict[str, CPUSet] = {}  # container id -> its claim's cpus
    owner_claim: dict[str, str] = {}
    shared: list[str] = []
    for step in range(STEPS):
        action = rng.choice(["shared", "shared", "prepare", "claimed", "stop", "unprepare"])
        if action == "shared":
            try:
                shared.append(await bed.runtime.create_container(pod, f"s{step}"))
            except CreateContainerError as exc:
                assert "shared pool is empty" in str(exc)
        elif action == "prepare" and len(await bed.allocator.shared()) > 2:
            uid, cpus = await bed.allocator.prepare(rng.choice([1, 2]))
            prepared[uid] = cpus
        elif action == "claimed" and prepared:
            uid = rng.choice(sorted(prepared))
            owner = bed.runtime.add_pod(f"own{step}")
            cid = await bed.runtime.create_container(owner, "app", claim_env((uid, prepared[uid])))
            pinned[cid] = prepared.pop(uid)
            owner_claim[cid] = uid
        elif action == "stop" and (pinned or shared):
            cid = rng.choice(sorted([*pinned, *shared]))
            await bed.runtime.stop_container(cid)
            await bed.runtime.remove_container(cid)
            if cid in pinned:
                # The pod is gone: the kubelet unprepares its claim.
                del pinned[cid]
                await bed.allocator.unprepare(owner_claim.pop(cid))
            else:
                shared.remove(cid)
        elif action == "unprepare" and prepared:
            uid = rng.choice(sorted(prepared))
            del prepared[uid]
            await bed.allocator.unprepare(uid)
        # Unsolicited pushes settle by themselves; otherwise a create is the solicited chance.
        if bed.plugin.unsolicited.enabled:
            pool = await bed.allocator.shared()
            await eventually(
                lambda p=pool: all(
                    CPUSet.parse(c) == p
                    for cid, c in bed.runtime.cpusets().items()
                    if cid not in pinned
                ),
                f"push after step {step} ({action})",
                timeout=10,
            )
        await check(bed, pinned, settled=bed.plugin.unsolicited.enabled)
