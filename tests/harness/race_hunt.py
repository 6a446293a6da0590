"""Rounds that provoke the nri-plugin's registration races on the real-node bed, judged by the
kernel: a claimed pod started while the nri-plugin restarts (shared containers being created
one after another meanwhile), and the shared pool changing while it synchronizes. The
real-node tier runs one round of each; benchmarks/registration_race_hunt.py runs many in a row
on either runtime and counts what each round found.

A round's verdict is what the kernel shows once the plugin is back and the bound has passed:
every claimed container on exactly its claim's CPUs, and no other container on any CPU a
running claimed container holds. Each violation is one line naming the container and its CPUs.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor

from dracpu.core.cpuset import EMPTY, CPUSet
from harness.containerd_node import ContainerdNode, NodeError
from harness.dev_up import DevUp
from harness.realnode_stack import Stack
from harness.waits import WaitTimeout, wait_for

SYNCHRONIZED = "synchronized with the runtime"
# The nri-plugin's line for a container it first heard of at its start: the race happened.
ADOPTED = "adopted at PostStartContainer"
# From the plugin's Synchronize to every container on its cpuset, on a nominal machine
# (scaled to this one by harness.speed): a move by update or one more registration.
BOUND = 10.0


def violations(node: ContainerdNode, claimed: Mapping[str, CPUSet]) -> list[str]:
    """What the kernel shows against the rule: each container of `claimed` (id -> its claim's
    CPUs) on exactly those, every other running container on none of them."""
    held = EMPTY
    for cpus in claimed.values():
        held |= cpus
    found = []
    for container_id in node.containers():
        try:
            cpus = CPUSet.parse(node.allowed_cpus(container_id))
        except NodeError:
            continue  # gone meanwhile
        want = claimed.get(container_id)
        if want is not None and cpus != want:
            found.append(f"claimed container {container_id[:13]} on {cpus}, not {want}")
        elif want is None and cpus & held:
            found.append(f"container {container_id[:13]} on {cpus}, claimed CPUs {cpus & held}")
    return found


def settle(node: ContainerdNode, claimed: Mapping[str, CPUSet]) -> list[str]:
    """The violations left once the bound has passed (none: it ends as soon as there are)."""
    with contextlib.suppress(WaitTimeout):
        wait_for(lambda: not violations(node, claimed), "the kernel view", timeout=BOUND)
    return violations(node, claimed)


def plugin_synchronized(dev: DevUp, before: int) -> None:
    wait_for(
        lambda: dev.service_log("nri-plugin").count(SYNCHRONIZED) > before,
        "the restarted nri-plugin synchronized",
        timeout=60,
        interval=0.1,
    )


def shared_until(node: ContainerdNode, pod: str, stop: threading.Event) -> int:
    """Shared containers of `pod` created and started one after another until `stop`: a
    creation is nearly always in flight meanwhile. How many."""
    made = 0
    while not stop.is_set():
        node.run_container(pod, f"shared-{made}")
        made += 1
    return made


def claimed_pod_during_plugin_restart(stack: Stack, name: str) -> list[str]:
    """The nri-plugin killed; as soon as its next process runs, a pod's claimed container
    created and started while shared containers of the pod are created one after another
    until the plugin has registered and synchronized: creations straddle its registration.
    The verdict once it is back."""
    node, dev = stack.node, stack.dev
    pod = node.run_pod(name)
    claim = dev.claim(name, pod_uid=node.pod_uid(pod))
    syncs = dev.service_log("nri-plugin").count(SYNCHRONIZED)
    stop = threading.Event()
    try:
        old = dev.service_pid("nri-plugin")
        os.kill(old, signal.SIGKILL)
        wait_for(lambda: dev.service_pid("nri-plugin") != old, "a new nri-plugin", timeout=60)
        with ThreadPoolExecutor(max_workers=1) as pool:
            churning = pool.submit(shared_until, node, pod, stop)
            try:
                claimed = node.run_container(pod, "claimed", cdi_devices=claim.cdi_devices)
                plugin_synchronized(dev, syncs)
            finally:
                stop.set()
                churning.result()
        return settle(node, {claimed.id: CPUSet.parse(claim.cpuset)})
    finally:
        node.remove_pod(pod)
        dev.release(claim.name)


def pool_change_during_sync(stack: Stack, name: str, shared_count: int = 3) -> list[str]:
    """Shared containers running; the nri-plugin killed, and while it comes back and
    synchronizes, claims prepared and released in a loop (the shared pool shrinking and
    growing under its Synchronize); then a claim kept and its container started; the verdict."""
    node, dev = stack.node, stack.dev
    pod = node.run_pod(name)
    node.run_containers(pod, [f"shared-{i}" for i in range(shared_count)])
    syncs = dev.service_log("nri-plugin").count(SYNCHRONIZED)
    stop = threading.Event()

    def churn() -> None:
        while not stop.is_set():
            dev.claim(f"{name}-churn")
            dev.release(f"{name}-churn")

    claim = None
    try:
        os.kill(dev.service_pid("nri-plugin"), signal.SIGKILL)
        with ThreadPoolExecutor(max_workers=1) as pool:
            churning = pool.submit(churn)
            try:
                plugin_synchronized(dev, syncs)
            finally:
                stop.set()
                churning.result()
        claim = dev.claim(name, pod_uid=node.pod_uid(pod))
        claimed = node.run_container(pod, "claimed", cdi_devices=claim.cdi_devices)
        return settle(node, {claimed.id: CPUSet.parse(claim.cpuset)})
    finally:
        node.remove_pod(pod)
        if claim is not None:
            dev.release(claim.name)
