"""Faults at random instants on the guest's cluster, judged by harness.kernel_judge.

Three loops share the run. The workload creates claimed pods (a ResourceClaim of 1 or 2 CPUs
each) and shared pods, and deletes them, through the API server. The fault loop, at random
instants, stops one of the driver's five containers with no grace (the kubelet restarts it),
restarts the kubelet or containerd in the guest, or kills the API server on the host and starts
it again (etcd keeps its data). The sampler reads the API server and then the guest kernel
(containerd's task folders, /proc and the cgroup files, in the guest: every running container,
and every process of the pods' cgroups no live task accounts for) all along and hands both to
the judge.

Every `settle_every` faults the faults pause: the time from the last fault to the first sample
where everything is as it should be (every pod Running with all its containers, or gone; every
container on its cpuset) is a convergence time. A settle that does not come within the bound
is left to the judge's counts."""

from __future__ import annotations

import contextlib
import json
import random
import signal
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bignode.cluster import POD_TIMEOUT, GuestCluster, published_capacity
from harness.cluster import NAMESPACE, CommandError, claim_manifest, cpus_request, pod_manifest
from harness.guest import GuestError
from harness.kernel_judge import ApiView, Judge, Seen
from harness.recorded_process import restart
from harness.speed import budget
from harness.waits import WaitTimeout, wait_for

from dracpu.core.cpuset import CPUSet

SERVICE_FAULTS = ("topology", "allocator", "dra-plugin", "nri-plugin", "api")
FAULTS = (*SERVICE_FAULTS, "kubelet", "containerd", "apiserver")
WORKLOAD_NAMESPACE = "default"
# Under emulation a driver container takes 10-40 s to start, a claimed pod 10-40 s to run: a
# node is given this long after the last fault to have every container on its cpuset and every
# pod Running or gone.
BOUND = 240.0
BACKOFF_MAX = "10s"
MAX_CLAIMED, MAX_SHARED = 3, 2
SAMPLE_GAP = 1.0
# The API server, killed, is started again as a static pod's kubelet would if that start fails.
APISERVER_RESTART_SEC = 5.0
FAULT_GAP = (0.5, 8.0)  # seconds between actions, uniform


@dataclass
class Tally:
    seed: int
    faults: Counter[str] = field(default_factory=Counter)
    operations: Counter[str] = field(default_factory=Counter)
    convergence: list[float] = field(default_factory=list)
    unconverged: int = 0
    samples: int = 0
    seconds: float = 0.0
    counts: dict[str, int] = field(default_factory=dict)
    offences: list[str] = field(default_factory=list)
    strays_seen: list[str] = field(default_factory=list)  # on the shared pool only: no offence

    def summary(self) -> str:
        times = sorted(self.convergence) or [0.0]
        p99 = times[min(len(times) - 1, round(0.99 * (len(times) - 1)))]
        return (
            f"seed {self.seed}, {self.seconds / 60:.1f} min: {sum(self.faults.values())} faults "
            f"{dict(self.faults.most_common())}, operations {dict(self.operations)}, "
            f"{self.samples} samples, {len(self.convergence)} settles (median "
            f"{statistics.median(times):.1f} s, p99 {p99:.1f} s, max {times[-1]:.1f} s, "
            f"{self.unconverged} past the bound), judge {self.counts}, "
            f"strays seen {len(self.strays_seen)}"
        )


class Soak:
    def __init__(
        self,
        cluster: GuestCluster,
        seed: int,
        report: Callable[[str], None] = print,
        bound: float = BOUND,
    ) -> None:
        self.cluster = cluster
        self.rng = random.Random(seed)
        self.report = report
        self.bound = budget(bound)
        numa = cluster.guest.call("kernel")["node_cpus"]
        self.judge = Judge(
            self.bound,
            {int(n): CPUSet.parse(c) for n, c in numa.items()},
            (WORKLOAD_NAMESPACE, NAMESPACE),
        )
        self.tally = Tally(seed)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._last_read_began = 0.0  # wall clock when the latest judged sample's reads began
        self._settled_at = 0.0  # that sample found everything settled
        self._pods: dict[str, str] = {}  # workload pod -> its claim ('' for shared)
        self._serial = 0
        self.cp_dir = cluster.guest.state / "controlplane"

    # ---- the sampler ---------------------------------------------------------------------

    def _sample(self) -> None:
        began = time.time()
        try:
            listed = json.loads(
                self.cluster.kubectl(
                    "get", "pods,resourceclaims,resourceslices", "-A", "-o", "json"
                )
            )["items"]
        except (CommandError, ValueError):
            return  # the API server is away: the kernel alone cannot be judged against it
        views = self.cluster.guest.call("cluster_containers", timeout=300)
        strays = self.cluster.guest.call("cluster_strays", timeout=300)
        seen = [Seen.from_view(key, view) for key, view in views.items()]
        with self._lock:
            before = set(self.judge.counts.offences())
            self.judge.sample(ApiView.from_list(listed), seen, time.time(), strays=strays)
            for offence in sorted(set(self.judge.counts.offences()) - before):
                self.report(f"soak: COUNTED {offence}")
            self.tally.samples = self.judge.samples
            self._last_read_began = began
            if not self.judge.unsettled:
                self._settled_at = began

    def _sampler(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(Exception):  # a failed read is no verdict; the next one
                self._sample()
            self._stop.wait(SAMPLE_GAP)

    # ---- the workload --------------------------------------------------------------------

    def _kubectl(self, *args: str, stdin: str | None = None) -> None:
        """Until the API server takes it (a fault may have it away)."""
        deadline = time.monotonic() + self.bound
        while True:
            try:
                self.cluster.kubectl(*args, stdin=stdin)
                return
            except CommandError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1.0)

    def _workload_step(self) -> None:
        claimed = [p for p, c in self._pods.items() if c]
        shared = [p for p, c in self._pods.items() if not c]
        choices = ["delete"] if self._pods else []
        if len(claimed) < MAX_CLAIMED:
            choices.append("claimed")
        if len(shared) < MAX_SHARED:
            choices.append("shared")
        what = self.rng.choice(choices)
        self._serial += 1
        if what == "claimed":
            name = f"soak-c{self._serial}"
            self._kubectl(
                "apply",
                "-f",
                "-",
                stdin=claim_manifest(name, [cpus_request(self.rng.choice((1, 2)))]),
            )
            self._kubectl(
                "apply", "-f", "-", stdin=pod_manifest(name, [("work", ["c"])], [("c", name)])
            )
            self._pods[name] = name
        elif what == "shared":
            name = f"soak-s{self._serial}"
            self._kubectl("apply", "-f", "-", stdin=pod_manifest(name, [("work", [])]))
            self._pods[name] = ""
        else:
            name = self.rng.choice(sorted(self._pods))
            claim = self._pods.pop(name)
            self._kubectl("delete", "pod", name, "--wait=false", "--ignore-not-found")
            if claim:
                self._kubectl(
                    "delete", "resourceclaim", claim, "--wait=false", "--ignore-not-found"
                )
        self.tally.operations[what] += 1

    # ---- the faults ----------------------------------------------------------------------

    def _fault(self) -> None:
        kinds = list(FAULTS)
        self.rng.shuffle(kinds)
        for kind in kinds:  # the first that can be done now
            at = time.time()
            # The judge hears of the fault before it is made: a sample read between the kill
            # and the answer of the call that made it would otherwise judge its effect (a
            # container gone, a pod not ready) by the bound of the fault before.
            with self._lock:
                before = self.judge.last_fault
                self.judge.fault(at)
            if not self._inject(kind):
                with self._lock:
                    if self.judge.last_fault == at:
                        self.judge.last_fault = before  # nothing was done
                continue
            return

    def _inject(self, kind: str) -> bool:
        """Fault `kind` now; False when it cannot be done now (the next kind is tried)."""
        if kind == "apiserver":
            # A crash: killed, then started again with the same command line.
            restart(
                self.cp_dir / "apiserver.pid",
                self.cp_dir / "logs" / "apiserver.log",
                sig=signal.SIGKILL,
                restart_sec=APISERVER_RESTART_SEC,
            )
            what = "apiserver"
        else:
            try:
                answer = self.cluster.guest.call("cluster_fault", timeout=300, kind=kind)
            except GuestError as exc:  # crictl while containerd restarts: another fault
                self.cluster.guest.check()  # but a hung guest ends the run
                self.report(f"soak: no {kind} fault now: {str(exc)[:200]}")
                return False
            if not answer["done"]:
                return False
            what = answer["what"]
        self.tally.faults[kind] += 1
        self.report(f"soak: fault {sum(self.tally.faults.values())}: {what}")
        return True

    def _settle(self, since: float = 0.0, what: str = "the last fault") -> None:
        """Faults paused until the judge finds everything settled on reads begun after the
        last fault (or after `since`, wall clock: the workload's removal at the end), or until
        what is not settled has been judged past its bound: read by a sample begun after
        `Judge.settle_by` (an item first seen off after the last fault has its bound from
        then), so whatever is still off is counted, not left behind by the next fault. At most
        twice the bound and a margin, for a sampler that gets no answers. Only a settle after
        faults is a convergence time."""
        last = max(since, self.judge.last_fault)
        began = time.monotonic()
        give_up = began + 2 * self.bound + 120
        unsettled: list[str] = []
        while time.monotonic() < give_up:
            with self._lock:
                if self._settled_at > last:
                    took = self._settled_at - last
                    if not since:
                        self.tally.convergence.append(took)
                    self.report(
                        f"soak: settled {took:.1f} s after {what}; "
                        f"{self.judge.samples} samples, judge {self.judge.counts.as_numbers()}"
                    )
                    return
                unsettled = list(self.judge.unsettled)
                judged = self._last_read_began > max(self.judge.settle_by, last) > 0
            if judged:
                break
            time.sleep(1.0)
        self.cluster.guest.check()  # a hung guest is no node that failed to settle
        self.tally.unconverged += 1
        self.report(
            f"soak: not settled {time.monotonic() - began:.0f} s into the settle: "
            f"{unsettled[:4]}; judge {self.judge.counts.offences()}"
        )

    # ---- the run -------------------------------------------------------------------------

    def run(self, faults: int, settle_every: int = 10, minutes: float = 0.0) -> Tally:
        """`faults` injected (or as many as `minutes` of faults allow, when given), a settle
        after every `settle_every` and at the end, the workload's pods removed."""
        began = time.monotonic()
        stop_at = began + minutes * 60 if minutes else float("inf")
        capped = self.cluster.guest.call("cluster_backoff", max_period=BACKOFF_MAX)
        self.report(f"soak: kubelet back-off capped at {BACKOFF_MAX}: {capped}")
        sampler = threading.Thread(target=self._sampler, name="soak-sampler", daemon=True)
        sampler.start()
        try:
            done_since_settle = 0
            while sum(self.tally.faults.values()) < faults and time.monotonic() < stop_at:
                time.sleep(self.rng.uniform(*FAULT_GAP))
                if self.rng.random() < 0.4:
                    self._workload_step()
                    continue
                self._fault()
                done_since_settle += 1
                if done_since_settle >= settle_every:
                    self._settle()
                    done_since_settle = 0
            if done_since_settle:  # else the loop's last settle was after the last fault
                self._settle()
            for name in sorted(self._pods):  # the workload's pods and claims removed
                self._kubectl("delete", "pod", name, "--wait=false", "--ignore-not-found")
                if self._pods[name]:
                    self._kubectl(
                        "delete", "resourceclaim", name, "--wait=false", "--ignore-not-found"
                    )
            self._pods.clear()
            # The removal's own settle, on samples read after it.
            self._settle(since=time.time(), what="the workload's removal")
        finally:
            self._stop.set()
            sampler.join(timeout=600)
            with contextlib.suppress(Exception):
                self.cluster.guest.call("cluster_backoff", max_period="")
        self.tally.seconds = time.monotonic() - began
        self.tally.counts = self.judge.counts.as_numbers()
        self.tally.offences = self.judge.counts.offences()
        self.tally.strays_seen = sorted(self.judge.strays_seen)
        return self.tally


def log_to(path: Path) -> Callable[[str], None]:
    """A report that prints a line and appends it to `path`."""

    def report(line: str) -> None:
        print(line, flush=True)
        with path.open("a") as log:
            log.write(f"{time.strftime('%H:%M:%S')} {line}\n")

    return report


def let_go(cluster: GuestCluster, idle: dict[str, int], report: Callable[[str], None]) -> str:
    """With the workload's pods and claims gone from the API server, the node holds nothing: it
    publishes `idle` again and its api lists no claim of the workload's namespace. "" when so;
    else what it still holds, with the driver's own view and the node's logs kept (logs/
    soak-held/ in the state folder) for the reader."""

    def held() -> bool:
        published = published_capacity(cluster)
        listed = cluster.api(f"/v1/claims?namespace={WORKLOAD_NAMESPACE}")["claims"]
        assert published == idle and not listed, f"published {published}, claims {listed}"
        return True

    try:
        wait_for(held, "the node to let go of the workload's claims", timeout=POD_TIMEOUT)
    except WaitTimeout as exc:
        report(f"soak: the node still holds claims after the removal: {exc}")
        with contextlib.suppress(Exception):
            for path in ("/v1/shared-pool", "/v1/containers"):
                report(f"soak: {path}: {json.dumps(cluster.api(path))}")
        with contextlib.suppress(Exception):
            cluster.guest.call("cluster_logs", into="soak-held", timeout=budget(300))
        return str(exc)
    return ""
