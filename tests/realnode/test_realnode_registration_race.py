"""Containers created while the nri-plugin registers, on the real runtime, judged by the kernel.

The plugin's registration is held (its restart finds the runtime's NRI socket moved aside) while
a claimed and a shared container are created, their OCI create held in flight by a CDI hook
(harness/creation_gate.py); the plugin registers and synchronizes, and only then do the
creations end and the containers start. CRI-O (no hold on creation while a plugin synchronizes)
sends the plugin neither their CreateContainer nor them in the Synchronize: the plugin first
hears of them at PostStartContainer, and must adopt them and move them onto their cpusets in
bounded time. containerd holds a plugin's synchronization while it creates a container, so
there the Synchronize lists them. Either way, every container must end on its cpuset, and no
container but the claimed one may run on the claim's CPU.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest
from harness.containerd_node import Container, ContainerdNode
from harness.creation_gate import CreationGate
from harness.dev_up import DevUp
from harness.race_hunt import (
    ADOPTED,
    BOUND,
    SYNCHRONIZED,
    claimed_pod_during_plugin_restart,
    plugin_synchronized,
    pool_change_during_sync,
)
from harness.realnode_stack import Stack, runtime
from harness.waits import wait_for

from dracpu.core.cpuset import CPUSet

pytestmark = pytest.mark.realnode


@contextmanager
def registration_held(node: ContainerdNode, dev: DevUp) -> Iterator[None]:
    """The nri-plugin restarted with the runtime's NRI socket moved aside: until the block
    ends, it retries and cannot register; the runtime has no plugin."""
    socket = node.nri_socket
    aside = socket.with_name(socket.name + ".held")
    socket.rename(aside)
    try:
        old = dev.service_pid("nri-plugin")
        os.kill(old, signal.SIGKILL)  # dev up's supervisor starts a new one
        wait_for(
            lambda: dev.service_pid("nri-plugin") != old,
            "a new nri-plugin",
            timeout=30,
            interval=0.2,
        )
        yield
    finally:
        aside.rename(socket)


def held_or_created(gate: CreationGate, creations: list[Future[Container]]) -> bool:
    """Each creation either ended (containerd: no OCI create before the start) or waits at the
    gate (CRI-O: the OCI create runs inside CreateContainer)."""
    done = sum(1 for f in creations if f.done() and f.exception() is None)
    return done + gate.entered() >= len(creations)


def cpus_of(node: ContainerdNode, container_id: str) -> CPUSet:
    return CPUSet.parse(node.allowed_cpus(container_id))


def test_containers_created_while_the_plugin_registers_end_on_their_cpusets(
    stack: Stack, tmp_path: Path
) -> None:
    node, dev = stack.node, stack.dev
    pod = node.run_pod("regrace")
    claim = dev.claim("regrace", pod_uid=node.pod_uid(pod))
    claimed_cpus = CPUSet.parse(claim.cpuset)
    before = node.run_container(pod, "before")  # known to the plugin all along
    gate = CreationGate(node.cdi_dir, tmp_path / "gate")
    syncs = dev.service_log("nri-plugin").count(SYNCHRONIZED)
    try:
        with ThreadPoolExecutor(max_workers=2) as pool:
            with registration_held(node, dev):
                creations = [
                    pool.submit(
                        node.create_container,
                        pod,
                        "in-flight-claimed",
                        cdi_devices=(*claim.cdi_devices, gate.device),
                    ),
                    pool.submit(
                        node.create_container, pod, "in-flight-shared", cdi_devices=(gate.device,)
                    ),
                ]
                wait_for(
                    lambda: held_or_created(gate, creations),
                    "both creations in flight (at the gate) or done",
                    timeout=60,
                    interval=0.2,
                )
            plugin_synchronized(dev, syncs)
            gate.open()
            claimed, shared = (f.result(timeout=120) for f in creations)
        node.start_container(claimed)
        node.start_container(shared)
        pool_cpus = CPUSet.parse(dev.shared_pool())

        # Within the bound, each on its cpuset, read from the kernel.
        wait_for(
            lambda: (
                cpus_of(node, claimed.id) == claimed_cpus and cpus_of(node, shared.id) == pool_cpus
            ),
            "the claimed container on its claim and the shared one on the pool",
            timeout=BOUND,
            interval=0.1,
        )
        assert CPUSet.parse(node.cgroup_cpus(claimed.id)) == claimed_cpus
        assert CPUSet.parse(node.cgroup_cpus(shared.id)) == pool_cpus
        # No container but the claimed one runs on the claim's CPUs.
        for container_id in node.containers():
            if container_id != claimed.id:
                assert not cpus_of(node, container_id) & claimed_cpus, container_id
        assert cpus_of(node, before.id) == pool_cpus

        if runtime() == "crio":
            # Neither was in the Synchronize: the one started first is adopted at its start;
            # the other, created by then, is adopted too or re-pinned by the Synchronize of
            # the registration that moved the first.
            lines = dev.service_log("nri-plugin").splitlines()
            adopted = [line for line in lines if ADOPTED in line]
            moved = adopted + [line for line in lines if "re-pinned containers" in line]
            assert any("regrace/in-flight-claimed" in line for line in adopted), adopted
            assert any("regrace/in-flight-shared" in line for line in moved), moved
    finally:
        gate.remove()
        node.remove_pod(pod)
        dev.release(claim.name)


def test_a_claimed_pod_started_during_an_nri_plugin_restart_ends_pinned(stack: Stack) -> None:
    """One round of the race hunt (benchmarks/registration_race_hunt.py)."""
    assert claimed_pod_during_plugin_restart(stack, "restart-race") == []


def test_the_shared_pool_changing_during_a_synchronize_leaves_no_container_on_a_claim(
    stack: Stack,
) -> None:
    """One round of the race hunt (benchmarks/registration_race_hunt.py)."""
    assert pool_change_during_sync(stack, "sync-race") == []
