"""Another party updating a container's cpuset through the runtime (the kubelet's static CPU
Manager reconciling every container to its default set, `crictl update`): the runtime relays the
update to the plugin (UpdateContainer), and the plugin answers with the container's own cpuset,
so a claimed container stays on its claim's CPUs and a shared one off them. An update that names
no cpuset, or the container's own, or one of a container the plugin never heard of, goes
through as asked."""

from __future__ import annotations

from harness.nri_bed import ONLINE, Bed, claim_env, prepare_seen
from harness.waits import eventually

from dracpu.core.cpuset import CPUSet
from dracpu.nri_plugin.transport.event_masks import SUBSCRIBED_EVENTS, event_bit
from dracpu.pb.nri import api_pb2


def kept(bed: Bed) -> float:
    for line in bed.plugin.metrics.text().splitlines():
        if line.startswith("dra_cpu_nri_updates_kept_total "):
            return float(line.split()[1])
    raise AssertionError("no dra_cpu_nri_updates_kept_total in the plugin's metrics")


def test_the_plugin_hears_of_updates() -> None:
    assert SUBSCRIBED_EVENTS & event_bit(api_pb2.UPDATE_CONTAINER)


async def test_an_update_to_every_cpu_leaves_a_claimed_container_on_its_claim(bed: Bed) -> None:
    uid, cpus = await prepare_seen(bed, 2)
    pod = bed.runtime.add_pod("db")
    pinned = await bed.runtime.create_container(pod, "postgres", claim_env((uid, cpus)))
    await bed.runtime.update_container(pinned, cpus=ONLINE.format())
    assert CPUSet.parse(bed.runtime.cpus(pinned)) == cpus
    assert kept(bed) == 1


async def test_an_update_onto_a_claims_cpus_leaves_a_shared_container_on_the_pool(
    bed: Bed,
) -> None:
    uid, cpus = await prepare_seen(bed, 2)
    pod = bed.runtime.add_pod("web")
    await bed.runtime.create_container(bed.runtime.add_pod("db"), "app", claim_env((uid, cpus)))
    shared = await bed.runtime.create_container(pod, "nginx")
    await eventually(
        lambda: CPUSet.parse(bed.runtime.cpus(shared)) == ONLINE - cpus, "shared off the claim"
    )
    await bed.runtime.update_container(shared, cpus=ONLINE.format())
    assert CPUSet.parse(bed.runtime.cpus(shared)) == ONLINE - cpus
    await bed.runtime.update_container(shared, cpus=cpus.format())
    assert CPUSet.parse(bed.runtime.cpus(shared)) == ONLINE - cpus
    assert kept(bed) == 2


async def test_an_update_naming_no_cpuset_or_the_containers_own_goes_through(bed: Bed) -> None:
    uid, cpus = await prepare_seen(bed, 1)
    pod = bed.runtime.add_pod("db")
    pinned = await bed.runtime.create_container(pod, "postgres", claim_env((uid, cpus)))
    await bed.runtime.update_container(pinned)  # shares, quota or memory only
    await bed.runtime.update_container(pinned, cpus=cpus.format())
    assert CPUSet.parse(bed.runtime.cpus(pinned)) == cpus
    assert kept(bed) == 0


async def test_a_container_the_plugin_never_heard_of_is_updated_as_asked(bed: Bed) -> None:
    pod = bed.runtime.add_pod("web")
    shared = await bed.runtime.create_container(pod, "nginx")
    await bed.runtime.remove_container(shared)  # forgotten by the plugin
    unknown = await bed.runtime.create_container(pod, "other")
    bed.plugin.registry.remove(unknown)
    await bed.runtime.update_container(unknown, cpus="0-1")
    assert bed.runtime.cpus(unknown) == "0-1"
    assert kept(bed) == 0


async def test_a_placed_claims_memory_nodes_are_kept_too(bed: Bed) -> None:
    uid, cpus = await bed.allocator.prepare(1, memory_placement="local")
    pool = await bed.allocator.shared()
    await eventually(lambda: bed.plugin.shared_pool == pool, "plugin to see the pool")
    pod = bed.runtime.add_pod("db")
    pinned = await bed.runtime.create_container(pod, "postgres", claim_env((uid, cpus)))
    assert bed.runtime.mems(pinned) == "0"
    await bed.runtime.update_container(pinned, mems="0-1")
    assert bed.runtime.mems(pinned) == "0" and CPUSet.parse(bed.runtime.cpus(pinned)) == cpus
    assert kept(bed) == 1
