"""What a version-skew run does to the driver and what it checks: claims prepared through the
kubelet simulator, containers pinned through the runtime simulator over NRI, the api asked.

The checks read the runtime's view of each container's cpuset (what the runtime applied from
the NRI plugin's adjustments and updates), the files the driver leaves on the node, and the
api's answers; they never trust one service's word about another.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import httpx
from harness import waits
from skew_builds import Build
from skew_stack import Stack

from dracpu.core.containers import Container
from dracpu.core.cpuset import CPUSet
from dracpu.core.errors import DracpuError
from dracpu.dev import workloads
from dracpu.dev.sim_clients import RuntimeClient
from dracpu.dev.sim_control import RUNTIME_SERVICE, ControlClient
from dracpu.dev.workloads import Workload

NAMESPACE = "skew"
SETTLE_TIMEOUT = 30.0
PIN_ATTEMPTS = 5
PIN_RETRY_DELAY = 0.5  # the kubelet's container-start retry, much shortened


class Bench:
    """The claims and containers one run holds, and the checks after every step."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.claims: dict[str, Workload] = {}  # uid -> claim with its running container
        self.shared: Container | None = None
        self.prepares = 0
        self.failed_prepares: list[str] = []
        # (nri-plugin build, reason) of every container the NRI plugin refused.
        self.refused_pins: list[tuple[str, str]] = []

    # -- driving ---------------------------------------------------------------------------

    def claim(self, cpus: int, numa: int | None = None) -> Workload:
        """Prepare a claim (kubelet simulator) and start its container (runtime simulator).
        A prepare that fails fails the test. A container the NRI plugin refuses is created
        again, as the kubelet would; that is recorded, and allowed only of a release's
        nri-plugin (see `refused_pins`)."""
        for _ in range(PIN_ATTEMPTS):
            self.prepares += 1
            try:
                made = asyncio.run(
                    workloads.claim(
                        self.stack.layout,
                        cpus=cpus,
                        numa=numa,
                        name=None,
                        namespace=NAMESPACE,
                        cpuset=None,
                    )
                )
            except DracpuError as exc:
                if "CreateContainer" not in str(exc):
                    self.failed_prepares.append(f"{type(exc).__name__}: {exc}")
                    raise AssertionError(f"prepare of a {cpus}-CPU claim failed: {exc}") from exc
                self.refused_pins.append((self.stack.builds["nri-plugin"].label, str(exc)))
                time.sleep(PIN_RETRY_DELAY)
                continue
            break
        else:
            raise AssertionError(f"container refused {PIN_ATTEMPTS} times: {self.refused_pins}")
        assert made.container is not None
        assert len(CPUSet.parse(made.cpuset)) == cpus, made
        # The container runs on exactly its claim, as the runtime applied it.
        assert CPUSet.parse(made.container_cpus) == CPUSet.parse(made.cpuset), made
        self.claims[made.uid] = made
        return made

    def release(self, made: Workload) -> None:
        asyncio.run(workloads.release(self.stack.layout, name=made.name, namespace=made.namespace))
        del self.claims[made.uid]
        layout = self.stack.layout
        leftovers = [
            path
            for path in (
                layout.cdi_dir / f"dra.k8s.io-cpu_claim-{made.uid}.json",
                layout.state_dir / "claims" / f"{made.uid}.json",
            )
            if path.exists()
        ]
        assert not leftovers, f"released claim {made.uid} left {leftovers}"

    def start_shared(self) -> str:
        """A container with no claim: it runs on the shared pool."""
        ref = Container.of(
            container_id=uuid.uuid4().hex,
            pod_uid=str(uuid.uuid4()),
            pod_namespace=NAMESPACE,
            pod_name="shared-pod",
            container_name="main",
        )
        cpus = asyncio.run(
            RuntimeClient(self.stack.layout.runtime_sim_socket).create_container(ref, [])
        )
        self.shared = ref
        return cpus

    # -- reading ---------------------------------------------------------------------------

    def containers(self) -> dict[str, str]:
        """container id -> cpuset, as the runtime holds them."""
        control = ControlClient(self.stack.layout.runtime_sim_socket, RUNTIME_SERVICE, "runtime")
        reply = asyncio.run(control.request("ListContainers", {}))
        return {str(cid): str(cpus) for cid, cpus in reply.get("containers", {}).items()}

    def api(self, path: str) -> Any:
        reply = httpx.get(self.stack.url + path, timeout=10)
        assert reply.status_code == 200, f"GET {path}: {reply.status_code} {reply.text}"
        return reply.json()

    def pinned(self) -> dict[str, CPUSet]:
        """container id -> the CPUs of its claim, for every running claimed container."""
        return {
            made.container.container_id: CPUSet.parse(made.cpuset)
            for made in self.claims.values()
            if made.container is not None
        }

    # -- checking --------------------------------------------------------------------------

    def check(self) -> None:
        """Every claimed container on exactly its claim (no cpuset changed), no CPU in two
        claims, the api serving the same claims, the shared container on the shared pool."""
        running = self.containers()
        changed = {
            cid: (str(cpus), running.get(cid))
            for cid, cpus in self.pinned().items()
            if running.get(cid) is None or CPUSet.parse(running[cid]) != cpus
        }
        assert not changed, f"claimed containers changed cpuset (claim, now): {changed}"
        owned: CPUSet = CPUSet()
        for cpus in self.pinned().values():
            assert not owned & cpus, f"CPUs {owned & cpus} are in two claims"
            owned = owned | cpus

        def api_agrees() -> bool:
            served = {c["uid"]: CPUSet.parse(c["cpus"]) for c in self.api("/v1/claims")["claims"]}
            expected = {uid: CPUSet.parse(made.cpuset) for uid, made in self.claims.items()}
            assert served == expected, f"api claims {served} != prepared {expected}"
            return True

        waits.wait_for(api_agrees, "the api to serve the prepared claims", timeout=SETTLE_TIMEOUT)
        if self.shared is not None:
            shared_id = self.shared.container_id

            def shared_on_pool() -> bool:
                pool = CPUSet.parse(self.api("/v1/shared-pool")["cpus"])
                now = CPUSet.parse(self.containers()[shared_id])
                assert not pool & owned, f"shared pool {pool} overlaps claims {owned}"
                assert now == pool, f"shared container on {now}, shared pool is {pool}"
                return True

            waits.wait_for(
                shared_on_pool,
                "the shared container to run on the shared pool",
                timeout=SETTLE_TIMEOUT,
            )

    def versions(self) -> dict[str, dict[str, Any]]:
        """service -> what the api reports of its version (pid, version, ...)."""
        return {entry["service"]: entry for entry in self.api("/v1/node")["versions"]}


def swap(bench: Bench, service: str, build: Build) -> float:
    """Replace `service` by its `build` while the claims' containers run; wait until the
    driver works again (the kubelet simulator registered a new dra-plugin, the api reports the
    new process). The seconds the service was away."""
    stack = bench.stack
    registered = stack.log("kubelet-sim").count("plugin registered")
    away = stack.replace(service, build)
    if service == "dra-plugin":
        waits.wait_for(
            lambda: stack.log("kubelet-sim").count("plugin registered") > registered,
            "the kubelet simulator to register the new dra-plugin",
            timeout=SETTLE_TIMEOUT,
        )
    pid = stack.pid(service)

    def reported() -> bool:
        entry = bench.versions().get(service, {})
        assert entry.get("pid") == pid, f"api reports {service} as {entry}, started pid {pid}"
        assert entry.get("version") == build.version, entry
        return True

    waits.wait_for(reported, f"the api to report the new {service}", timeout=SETTLE_TIMEOUT)
    return away


def exercise(bench: Bench) -> None:
    """A prepare, its container pinned, the api asked, the release; checks after each."""
    bench.check()
    made = bench.claim(2)
    bench.check()
    bench.release(made)
    bench.check()
    assert not bench.stack.exited(), f"processes exited: {bench.stack.exited()}"
