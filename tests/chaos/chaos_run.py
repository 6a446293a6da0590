"""A chaos run on the real node: a workload loop and a fault loop at once, a settle and a check
of every invariant (chaos_check) every few faults.

The workload prepares and releases claims (through the kubelet simulator of `dracpu dev up`)
and creates, starts, stops and removes claimed and shared containers on the real containerd.
The fault loop, in its own thread, SIGKILLs or SIGSTOPs (and later SIGCONTs) a random one of
the five services or containerd at random instants; `dev up` restarts a killed service, the
run restarts a killed containerd (its containers keep running under their shims). A settle
stops the faults, brings everything back, finishes what the faults cut short (as the kubelet
would: an unacknowledged claim is unprepared, a container in doubt removed), waits for the
node to converge and then checks.

Everything random comes from one seed, printed, so a failing run can be replayed (as far as
timing allows).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import statistics
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos.chaos_check import ONLINE, Book, Live, check, cpuset_file, served
from harness.containerd_node import RECORD, ContainerdNode, NodeError
from harness.dev_up import DevUp
from harness.realnode_stack import Stack
from harness.waits import WaitTimeout, wait_for

from dracpu.core.cpuset import CPUSet
from dracpu.dev.apiserver.client import ClusterClient
from dracpu.dev.layout import RunLayout

SERVICES = ("topology", "allocator", "dra-plugin", "nri-plugin", "api")
TARGETS = (*SERVICES, "containerd")
FAULT_GAP = (0.1, 0.8)  # seconds between two faults
STOP_TIME = (0.1, 1.5)  # how long a SIGSTOPped process stays stopped
FAULTS_PER_SETTLE = 8
SETTLE_TIMEOUT = 90.0
POLL = 0.2  # seconds between two looks at a settling node
MAX_CLAIMS = max(1, len(ONLINE) // 2)  # keep CPUs in the shared pool


@dataclass
class Tally:
    faults: int = 0
    by_target: dict[str, int] = field(default_factory=dict)
    settles: int = 0
    violations: list[str] = field(default_factory=list)
    operations: int = 0
    failed_operations: int = 0
    acknowledged_prepares: int = 0
    releases: int = 0
    settle_seconds: list[float] = field(default_factory=list)

    def summary(self) -> str:
        targets = " ".join(f"{t}={n}" for t, n in sorted(self.by_target.items()))
        return (
            f"faults injected={self.faults} ({targets}) settles checked={self.settles} "
            f"violations={len(self.violations)} operations={self.operations} "
            f"(failed under faults={self.failed_operations}) "
            f"acknowledged prepares={self.acknowledged_prepares} releases={self.releases} "
            f"settle median={statistics.median(self.settle_seconds or [0]):.1f}s"
        )


def tolerant(probe: Callable[[], Any]) -> Callable[[], Any]:
    """`probe` with any error it raises counting as "not yet" for harness.waits.wait_for: a
    peer still coming back fails in many ways (a node step, a subprocess, gRPC, a half-written
    file)."""

    def attempt() -> Any:
        try:
            return probe()
        except Exception as exc:
            raise AssertionError(f"{type(exc).__name__}: {exc}") from exc

    return attempt


class Chaos:
    def __init__(self, stack: Stack, seed: int, report: Callable[[str], None] = print) -> None:
        self.node: ContainerdNode = stack.node
        self.dev: DevUp = stack.dev
        self.layout = RunLayout.at(stack.dev.run_dir)
        self.seed = seed
        self.random = random.Random(seed)
        self.fault_random = random.Random(seed + 1)
        self.report = report
        self.book = Book()
        self.tally = Tally()
        self.pod = ""
        self._numbers = 0
        self._faulting = threading.Event()
        self._quit = threading.Event()
        self._gate = threading.Lock()
        self._killed_containerd: set[int] = set()

    # -- faults ----------------------------------------------------------------------------

    def service_pid(self, name: str) -> int | None:
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            status = json.loads(self.layout.status_file.read_text())
            return int(status["services"][name]["pid"])
        return None

    def target_pid(self, target: str) -> int | None:
        if target == "containerd":
            process = self.node.process
            return process.pid if process is not None and process.poll() is None else None
        return self.service_pid(target)

    def _fault_loop(self) -> None:
        while not self._quit.wait(self.fault_random.uniform(*FAULT_GAP)):
            # The gate: a settle takes it to stop the faults, so none is half done then.
            with self._gate:
                if self._faulting.is_set():
                    self._inject()
                    # Like its service manager, bring a killed containerd back soon.
                    try:
                        self._keep_containerd()
                    except NodeError as exc:
                        self.report(f"chaos: containerd not back yet: {exc}")

    def _inject(self) -> None:
        target = self.fault_random.choice(TARGETS)
        kill = self.fault_random.random() < 0.5
        pause = self.fault_random.uniform(*STOP_TIME)
        pid = self.target_pid(target)
        if pid is None:
            return
        try:
            if kill:
                if target == "containerd":
                    self._killed_containerd.add(pid)
                os.kill(pid, signal.SIGKILL)
                if target == "containerd" and self.node.process is not None:
                    # SIGKILL is delivered, not yet done: until the process has exited, a
                    # liveness check still sees it running and would not restart it.
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        self.node.process.wait(10)
            else:
                os.kill(pid, signal.SIGSTOP)
                time.sleep(pause)
                os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            return  # gone meanwhile (a service being restarted): no fault
        self.tally.faults += 1
        self.tally.by_target[target] = self.tally.by_target.get(target, 0) + 1
        if self.tally.faults % FAULTS_PER_SETTLE == 0:
            self._faulting.clear()  # the workload settles and checks now

    # -- the workload ----------------------------------------------------------------------

    def _name(self, prefix: str) -> str:
        self._numbers += 1
        return f"{prefix}{self._numbers}"

    def _step(self) -> None:
        """One random operation of the workload; a failure under faults is tolerated and
        repaired at the next settle."""
        book = self.book
        choices: list[Callable[[], None]] = [self._add_shared]
        if len(book.claims) < MAX_CLAIMS:
            choices.append(self._prepare)
        if any(not c.containers for c in book.claims.values()):
            choices.append(self._add_claimed)  # one container per claim
        if book.claims:
            choices.append(self._release)
        if book.shared or any(c.containers for c in book.claims.values()):
            choices.append(self._remove_container)
        operation = self.random.choice(choices)
        self.tally.operations += 1
        try:
            operation()
        except (NodeError, OSError, TimeoutError, subprocess.TimeoutExpired) as exc:
            self.tally.failed_operations += 1
            self.report(f"chaos: {operation.__name__.strip('_')} failed under faults: {exc}")

    def _prepare(self) -> None:
        name = self._name("c")
        claim = self.dev.claim(name, cpus=1, pod_uid=self.node.pod_uid(self.pod))
        self.book.claims[claim.uid] = Live(
            claim.name, claim.uid, CPUSet.parse(claim.cpuset), claim.cdi_devices
        )
        self.tally.acknowledged_prepares += 1

    def _release(self) -> None:
        claim = self.random.choice(list(self.book.claims.values()))
        for cid in list(claim.containers):
            self.node.remove_container(cid)
            del claim.containers[cid]
        # Asked for: no longer an acknowledged claim; released for good once a release
        # succeeds (retried at the settle if this one is cut short, as the kubelet retries).
        del self.book.claims[claim.uid]
        self.book.releasing[claim.uid] = claim.name
        self.dev.release(claim.name)
        self._released(claim.uid)

    def _released(self, uid: str) -> None:
        del self.book.releasing[uid]
        self.book.released.add(uid)
        self.tally.releases += 1

    def _add_claimed(self) -> None:
        claim = self.random.choice([c for c in self.book.claims.values() if not c.containers])
        # Another container of the pod presenting the claim would be refused (the driver gives
        # a claim to one container), or, started while the nri-plugin is away, left on the
        # shared pool: the claim's container runs again under its own name.
        claim.container_name = claim.container_name or self._name("k")
        container = self.node.run_container(
            self.pod, claim.container_name, cdi_devices=claim.cdi_devices
        )
        claim.containers[container.id] = self.pod

    def _add_shared(self) -> None:
        if len(self.book.shared) >= 3:
            cid = self.random.choice(list(self.book.shared))
            self.node.remove_container(cid)
            del self.book.shared[cid]
            return
        container = self.node.run_container(self.pod, self._name("s"))
        self.book.shared[container.id] = self.pod

    def _remove_container(self) -> None:
        owners: list[dict[str, str]] = [self.book.shared]
        owners += [c.containers for c in self.book.claims.values() if c.containers]
        owner = self.random.choice([o for o in owners if o])
        cid = self.random.choice(list(owner))
        self.node.stop_container(cid)
        self.node.remove_container(cid)
        del owner[cid]

    # -- settle ----------------------------------------------------------------------------

    def _revive(self) -> None:
        """Everything running again: containerd restarted if it died (its containers live on
        under their shims), every service restarted by `dev up` and ready."""
        wait_for(
            tolerant(self._revived),
            "every service and containerd ready",
            timeout=SETTLE_TIMEOUT,
            interval=POLL,
        )

    def _keep_containerd(self) -> None:
        """Start containerd again when it is dead (its containers live on under their
        shims); one that died without being killed is a violation."""
        process = self.node.process
        if process is not None and process.poll() is None:
            return
        if process is not None and process.pid not in self._killed_containerd:
            self.tally.violations.append(
                f"containerd exited on its own ({process.returncode}): {self.node.log_tail(5)}"
            )
        self.node.stop()  # reaped; closes its log
        # Without its record, start() does not treat the crashed containerd's pods and shims
        # as leftovers of an earlier run: they must survive, as on a real node.
        (self.node.base / RECORD).unlink(missing_ok=True)
        self.node.start()

    def _revived(self) -> bool:
        with self._gate:
            self._keep_containerd()
        for name in SERVICES:
            pid = self.service_pid(name)
            if pid is None or not Path(f"/proc/{pid}").exists():
                return False
        return bool(self.dev.ready())

    def _repair(self) -> None:
        """Finish what faults cut short, as the kubelet and the runtime's users would: the
        node runs exactly the book's containers, the allocator holds exactly its claims."""
        with self._gate:
            self._keep_containerd()  # it may have died after the revive: bring it back first
        owners: list[dict[str, str]] = [self.book.shared]
        owners += [claim.containers for claim in self.book.claims.values()]
        present = set(self.node.crictl("ps", "-aq").stdout.split())
        for cid in present - {cid for owner in owners for cid in owner}:
            self.node.remove_container(cid)
        for owner in owners:
            for cid in list(owner):
                # A removal cut short by a fault may still have removed the container.
                if cid not in present:
                    del owner[cid]
                elif self.node.container_state(cid) != "CONTAINER_RUNNING":
                    self.node.remove_container(cid)
                    del owner[cid]
        for uid, name in list(self.book.releasing.items()):
            try:
                self.dev.release(name)
            except NodeError as exc:
                if "not found" not in str(exc):
                    raise
            self._released(uid)
        # A prepare that failed may still have been made by the allocator: unprepare what the
        # book does not hold.
        for entry in self.dev.get("/v1/claims")["claims"]:
            if entry["uid"] not in self.book.claims:
                self._unprepare(entry)

    def _unprepare(self, entry: dict[str, Any]) -> None:
        import asyncio

        from dracpu.dev.sim_clients import KubeletClient

        kubelet = KubeletClient(self.layout.kubelet_sim_socket)
        asyncio.run(kubelet.unprepare(entry["namespace"], entry["name"], entry["uid"]))
        cluster = ClusterClient(self.layout.apiserver_kubeconfig)
        try:
            cluster.delete_claim(entry["namespace"], entry["name"])
        finally:
            cluster.close()
        (self.layout.workloads_dir / f"{entry['namespace']}_{entry['name']}.json").unlink(
            missing_ok=True
        )
        self.book.released.add(entry["uid"])

    def _converged(self) -> list[str]:
        pids = {}
        for claim in self.book.claims.values():
            for cid in claim.containers:
                pids[cid] = self.node.container_pid(cid)
        for cid in self.book.shared:
            pids[cid] = self.node.container_pid(cid)
        expected = set(self.layout.all_sockets())
        return check(
            self.book,
            pids,
            self.layout.root,
            served(self.dev.get("/v1/claims")["claims"]),
            expected,
        )

    def settle(self) -> None:
        began = time.monotonic()
        with self._gate:
            self._faulting.clear()
        self._revive()
        wait_for(
            tolerant(lambda: self._repair() or True),
            "the node repaired",
            timeout=SETTLE_TIMEOUT,
            interval=POLL,
        )
        violations: list[str] = []

        def clean() -> bool:
            nonlocal violations
            violations = self._converged()
            return not violations

        with contextlib.suppress(WaitTimeout):
            wait_for(
                tolerant(clean), "the invariants to hold", timeout=SETTLE_TIMEOUT, interval=POLL
            )
        self.tally.settles += 1
        self.tally.settle_seconds.append(time.monotonic() - began)
        if violations:
            self.report(f"chaos: settle {self.tally.settles}: {len(violations)} violations")
            for line in violations:
                self.report(f"chaos:   {line}")
        self.tally.violations += violations
        self.book.released.clear()

    def prove_checker(self) -> None:
        """The checker sees what the kernel does: a shared container whose cgroup is narrowed
        behind the driver's back is reported, and is not once put back."""
        container = self.node.run_container(self.pod, self._name("probe"))
        self.book.shared[container.id] = self.pod
        wait_for(
            tolerant(lambda: not self._converged()),
            "the probe container settled",
            timeout=SETTLE_TIMEOUT,
            interval=POLL,
        )
        cpuset = cpuset_file(self.node.container_pid(container.id))
        original = cpuset.read_text().strip()
        cpuset.write_text(f"{ONLINE.first()}\n")
        try:
            blind = not any(container.id[:12] in line for line in self._converged())
        finally:
            cpuset.write_text(f"{original}\n")
        if blind:
            raise AssertionError(f"the checker missed {cpuset} narrowed to {ONLINE.first()}")
        wait_for(
            tolerant(lambda: not self._converged()),
            "the probe container restored",
            timeout=SETTLE_TIMEOUT,
            interval=POLL,
        )
        self.node.remove_container(container.id)
        del self.book.shared[container.id]

    # -- the run ---------------------------------------------------------------------------

    def run(self, *, faults: int | None = None, until: threading.Event | None = None) -> Tally:
        """Until `faults` faults were injected and checked, or `until` is set."""
        self.report(f"chaos: seed {self.seed}; CPUs {ONLINE}; targets {', '.join(TARGETS)}")
        self.pod = self.node.run_pod("chaos")
        faulter = threading.Thread(target=self._fault_loop, name="faults", daemon=True)
        faulter.start()
        try:
            if len(ONLINE) > 1:
                self.prove_checker()
            self.settle()  # the starting point holds
            self._faulting.set()
            while not (until is not None and until.is_set()):
                if faults is not None and self.tally.faults >= faults:
                    break
                if not self._faulting.is_set():
                    self.settle()
                    self.report(f"chaos: {self.tally.summary()}")
                    self._faulting.set()
                self._step()
            self.settle()
        finally:
            self._quit.set()
            faulter.join(10)
            self._revive()
        self.report(f"chaos: seed {self.seed}: {self.tally.summary()}")
        return self.tally
