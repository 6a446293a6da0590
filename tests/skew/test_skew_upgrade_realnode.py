"""Upgrade walk-through on the real node: the driver runs from the previous release next to a
real containerd + runc with claimed and shared containers; each service is then replaced, one
at a time, by this checkout's. While each one is away a sampler reads every running container's
cgroup `cpuset.cpus` and `Cpus_allowed_list` from the kernel (no change allowed), a prepare
(the kubelet simulator re-preparing a held claim) and a pin (a new container on real
containerd) are issued at once and timed until they succeed, the kubelet simulator registers a
replaced dra-plugin again, and the api reports the new process and version.

The measured waits are printed as the rows of the upgrade table in docs/user/upgrades.md."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from harness.containerd_node import ContainerdNode, NodeError, cgroup_cpuset, cpus_allowed
from harness.dev_up import DevUp
from harness.realnode_stack import api_port, require_realnode
from harness.waits import wait_for
from skew_builds import Build
from skew_stack import DRIVER_SERVICES, Stack

from dracpu.core.cpuset import CPUSet
from dracpu.core.errors import DracpuError
from dracpu.dev import workloads
from dracpu.dev.sim_clients import KubeletClient
from dracpu.dev.workloads import Workload

pytestmark = [pytest.mark.skew, pytest.mark.realnode, pytest.mark.timeout(900)]

ONLINE = CPUSet.parse(Path("/sys/devices/system/cpu/online").read_text().strip())
CLAIMS = max(1, min(3, len(ONLINE) - 1))  # three claims where the node has the CPUs
SAMPLE_INTERVAL = 0.05
# A prepare issued while a service is away is tried again until this budget (scaled to the
# machine): longer than any service's start.
PREPARE_BUDGET = 180.0


class Sampler(threading.Thread):
    """Reads the kernel's cpuset of every watched process until stopped; keeps deviations."""

    def __init__(self, expected: dict[int, CPUSet]) -> None:
        super().__init__(name="cpuset-sampler", daemon=True)
        self.expected = expected
        self.changes: list[str] = []
        self.samples = 0
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.wait(SAMPLE_INTERVAL):
            for pid, cpus in self.expected.items():
                try:
                    seen = (CPUSet.parse(cgroup_cpuset(pid)), CPUSet.parse(cpus_allowed(pid)))
                except (OSError, NodeError) as exc:
                    self.changes.append(f"pid {pid}: unreadable: {exc}")
                    continue
                if seen != (cpus, cpus):
                    self.changes.append(f"pid {pid}: {seen[0]}/{seen[1]}, want {cpus}")
            self.samples += 1

    def finish(self) -> list[str]:
        self._done.set()
        self.join(5)
        return self.changes


@pytest.fixture
def walk(release: Build, head: Build) -> Iterator[tuple[Stack, ContainerdNode]]:
    require_realnode()
    base = Path(tempfile.mkdtemp(prefix="dracpu-up-", dir="/tmp"))
    builds = {name: release for name in DRIVER_SERVICES} | {"apiserver": head, "kubelet-sim": head}
    stack = Stack(base / "rd", Path("/sys"), api_port(), builds, runtime_sim=False)
    node = ContainerdNode(base / "node", stack.layout.root)
    failed = True
    try:
        node.start()  # first: the nri-plugin dials containerd's NRI socket
        stack.start_all()
        yield stack, node
        failed = False
    finally:
        try:
            node.teardown()
        finally:
            stack.stop_all()
            if failed:
                print(f"upgrade: kept {base}")
            else:
                shutil.rmtree(base, ignore_errors=True)


def prepare(stack: Stack, cpus: int, pod_uid: str) -> Workload:
    """A claim in the pod's namespace, reserved for the pod, as the scheduler would."""
    return asyncio.run(
        workloads.claim(
            stack.layout,
            cpus=cpus,
            numa=None,
            name=None,
            namespace="upgrade",
            cpuset=None,
            pod_uid=pod_uid,
        )
    )


def test_each_service_upgraded_in_turn_keeps_containers_pinned(
    walk: tuple[Stack, ContainerdNode], release: Build, head: Build
) -> None:
    stack, node = walk
    wait_for(lambda: "plugin registered" in stack.log("kubelet-sim"), "plugin registration")
    cdi = DevUp(stack.layout.root, 0)
    pod = node.run_pod("upgrade", namespace="upgrade")
    claims = [prepare(stack, 1, node.pod_uid(pod)) for _ in range(CLAIMS)]
    expected: dict[int, CPUSet] = {}
    for number, made in enumerate(claims):
        container = node.run_container(
            pod, f"claimed{number}", cdi_devices=cdi.cdi_devices(made.uid)
        )
        expected[node.container_pid(container.id)] = CPUSet.parse(made.cpuset)
    pool = ONLINE
    for cpus in expected.values():
        pool = pool - cpus
    shared = node.run_container(pod, "shared")
    wait_for(
        lambda: CPUSet.parse(node.allowed_cpus(shared.id)) == pool, "the shared container pinned"
    )
    expected[node.container_pid(shared.id)] = pool
    for pid, cpus in expected.items():
        assert CPUSet.parse(cgroup_cpuset(pid)) == cpus
    held = claims[0]
    base = probe(stack, node, pod, held, pool, "baseline", time.monotonic())
    print(f"upgrade: | none (baseline) | - | {base.prepare_cell()} | {base.pinned:.1f} s | |")
    rows = [
        upgrade(stack, node, pod, service, head, expected, pool, held)
        for service in DRIVER_SERVICES
    ]
    print("upgrade: | service | down until ready | prepare waited | pin waited | cpusets |")
    for row in rows:
        print(f"upgrade: {row}")
    assert not stack.exited(), stack.exited()


def upgrade(
    stack: Stack,
    node: ContainerdNode,
    pod: str,
    service: str,
    head: Build,
    expected: dict[int, CPUSet],
    pool: CPUSet,
    held: Workload,
    hold: float = 0.0,
) -> str:
    """Replace `service` by `head`'s while the kernel is sampled; a row of the upgrade table.
    With `hold`, the service stays stopped that many seconds before its replacement starts
    (an upgrade whose new image is slow to come)."""
    registered = stack.log("kubelet-sim").count("plugin registered")
    before = stack.builds[service].label
    sampler = Sampler(expected)
    sampler.start()
    stack.stop(service)
    stopped = time.monotonic()
    problems: list[BaseException] = []
    ready_at: list[float] = []

    def start() -> None:
        try:
            time.sleep(hold)
            stack.start(service, head)
            ready_at.append(time.monotonic())
        except BaseException as exc:
            problems.append(exc)

    starter = threading.Thread(target=start)
    starter.start()
    seen = probe(stack, node, pod, held, pool, f"probe-{service}", stopped)
    starter.join(120)
    assert not problems and ready_at, f"{service} from {head.label} did not start: {problems}"
    ready = ready_at[0]
    if service == "dra-plugin":
        wait_for(
            lambda: stack.log("kubelet-sim").count("plugin registered") > registered,
            "the kubelet simulator to register the new dra-plugin",
        )
    pid = stack.pid(service)

    def reported() -> dict[str, object] | None:
        versions = asyncio.run(_versions(stack))
        return next(
            (v for v in versions if v.get("service") == service and v.get("pid") == pid), None
        )

    entry = wait_for(reported, f"the api to report the new {service}")
    assert entry["version"] == head.version, entry
    changes = sampler.finish()
    assert not changes, f"cpusets changed while {service} was upgraded: {changes[:5]}"
    assert sampler.samples > 0
    print(f"upgrade: {service} {before} -> {head.label}: ready after {ready - stopped:.1f}s")
    return (
        f"| {service} | {ready - stopped:.1f} s | {seen.prepare_cell()} "
        f"| {seen.pinned:.1f} s | {sampler.samples} samples, 0 changes |"
    )


@dataclass
class Probe:
    """What a probe saw: the seconds from its start until the prepare succeeded and until the
    container was pinned, and the kubelet's first failed try (seconds, error) if any."""

    prepared: float
    pinned: float
    first_failure: tuple[float, str] | None = None

    def prepare_cell(self) -> str:
        if self.first_failure is None:
            return f"{self.prepared:.1f} s"
        at, error = self.first_failure
        return f"{self.prepared:.1f} s (first try failed at {at:.1f} s: {error[:80]})"


def prepare_as_the_kubelet_does(
    kubelet: KubeletClient, held: Workload, since: float, name: str
) -> tuple[float, tuple[float, str] | None]:
    """NodePrepareResources through the kubelet simulator, tried again after a failure as the
    kubelet retries a pod's prepare, until it succeeds: (seconds from `since`, first failure)."""
    first: list[tuple[float, str]] = []

    def attempt() -> bool:
        try:
            asyncio.run(kubelet.prepare(held.namespace, held.name, held.uid))
        except DracpuError as exc:
            if not first:
                first.append((time.monotonic() - since, str(exc)))
                print(f"upgrade: {name}: prepare failed at {first[0][0]:.1f} s, again: {exc}")
            return False
        return True

    wait_for(attempt, f"the prepare issued with {name} to succeed", timeout=PREPARE_BUDGET,
             interval=1.0)  # fmt: skip
    return time.monotonic() - since, (first[0] if first else None)


def probe(
    stack: Stack,
    node: ContainerdNode,
    pod: str,
    held: Workload,
    pool: CPUSet,
    name: str,
    since: float,
) -> Probe:
    """A prepare (the kubelet simulator re-preparing a held claim, tried again until it
    succeeds) and a pin (a new container, until the kernel shows it on the shared pool) issued
    at once; the seconds from `since` until each succeeded."""
    kubelet = KubeletClient(stack.layout.kubelet_sim_socket)
    done: list[tuple[float, tuple[float, str] | None]] = []
    problems: list[BaseException] = []

    def prepare() -> None:
        try:
            done.append(prepare_as_the_kubelet_does(kubelet, held, since, name))
        except BaseException as exc:
            problems.append(exc)

    preparer = threading.Thread(target=prepare)
    preparer.start()
    container = node.run_container(pod, name)
    wait_for(
        lambda: CPUSet.parse(node.allowed_cpus(container.id)) == pool,
        f"the {name} container pinned",
    )
    pinned = time.monotonic()
    preparer.join()
    assert done, f"the prepare issued with {name} did not succeed: {problems}"
    node.remove_container(container.id)
    return Probe(prepared=done[0][0], pinned=pinned - since, first_failure=done[0][1])


async def _versions(stack: Stack) -> list[dict[str, object]]:
    import httpx

    async with httpx.AsyncClient(timeout=10) as client:
        reply = await client.get(stack.url + "/v1/node")
    versions: list[dict[str, object]] = reply.json()["versions"]
    return versions
