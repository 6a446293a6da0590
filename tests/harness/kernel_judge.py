"""A judge of a node under faults that reads only what a fleet owner would trust: the node's
kernel (each running container's Cpus_allowed_list and its cgroup's effective cpuset, found
through the runtime) and the API server (pods, ResourceClaims' allocations, ResourceSlices).
It never reads the driver's api, records or logs.

What the API server says a claim was given (`Grant`): the devices of its allocation's results
for dra.cpu, each resolved through the published slices: an individual device names its CPU
(dra.cpu/cpuID); a grouped one its NUMA node (resource.kubernetes.io/numaNode), whose CPUs the
kernel lists, and the result's consumed dra.cpu/cpu says how many of them.

Each sample (`Judge.sample`) counts:

- **CPUs in two claims**: a device allocated beyond what it holds (an individual device in two
  claims, a NUMA group's consumed CPUs summing past its CPUs), from the API server; and two
  claimed containers, each pinned to a set its claim could hold, sharing a CPU, from the kernel.
- **containers off their cpuset for longer than the bound**: the two kernel views disagreeing;
  a claimed container not on exactly its claim's CPUs (its acknowledged set, or before that a
  set of the right size inside its devices); a shared container on a CPU a claim holds. Being
  off is allowed for `bound` seconds after the later of the moment it was first seen off and
  the last fault (what converging means: faults stop, the node settles).
- **acknowledged claims lost**: a claim whose container was seen Running on its CPUs (it is
  then acknowledged, with those CPUs) later pinned elsewhere past the bound, its allocation
  gone while its pod runs, or its pod Failed.
- **pods stuck**: a pod not Running within the bound of its creation (or the last fault), or
  a deleted one still present the bound after its deletion.
- **strays on claimed CPUs past the bound**: processes the kernel runs for nothing the
  cluster has, on CPUs a claim of another pod holds. A stray is in a pod's cgroup with no live
  task of the runtime behind it (harness.runtime_tasks.stray_processes: a runtime that lost
  track of a container whose processes run on), or is a running container of a pod the API
  server no longer lists. Nobody updates a stray's cpuset, so it stays where it was when it
  was lost; a stray on the shared pool alone is only noted (`strays_seen`), until a claim takes
  one of its CPUs.

Each offence is counted once, by what it is about (a claim, a container, a pod)."""

from __future__ import annotations

import calendar
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dracpu.core.cpuset import CPUSet
from harness.runtime_tasks import pod_uid

DRIVER = "dra.cpu"
CPU_CAPACITY = "dra.cpu/cpu"
ATTR_CPU_ID = "dra.cpu/cpuID"
ATTR_NUMA_NODE = "resource.kubernetes.io/numaNode"


@dataclass(frozen=True)
class Seen:
    """One running container as the kernel shows it."""

    namespace: str
    pod: str
    container: str
    pid: int
    cpus_allowed: CPUSet
    cpus_effective: CPUSet

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.pod}/{self.container}"

    @staticmethod
    def from_view(key: str, view: Mapping[str, Any]) -> Seen:
        """From the guest's `namespace/pod/container` -> kernel view answer."""
        namespace, pod, container = key.split("/", 2)
        return Seen(
            namespace,
            pod,
            container,
            int(view["pid"]),
            CPUSet.parse(str(view["cpus_allowed"])),
            CPUSet.parse(str(view["cpus_effective"])),
        )


@dataclass(frozen=True)
class Grant:
    """What the API server says one claim was given: `count` CPUs inside `within`."""

    uid: str
    name: str
    within: CPUSet
    count: int
    devices: tuple[tuple[str, int], ...]  # each device with the CPUs taken of it

    def could_hold(self, cpus: CPUSet) -> bool:
        return len(cpus) == self.count and cpus.issubset(self.within)


def _quantity(value: str) -> int:
    if value.endswith("m"):
        return int(value[:-1]) // 1000
    return int(float(value))


def _timestamp(text: str | None) -> float | None:
    if not text:
        return None
    return float(calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ")))


def published_devices(
    slices: Iterable[Mapping[str, Any]], numa_cpus: Mapping[int, CPUSet]
) -> dict[tuple[str, str], CPUSet]:
    """(pool, device) -> the CPUs that device stands for, from its attributes and the
    kernel's NUMA node lists."""
    devices: dict[tuple[str, str], CPUSet] = {}
    for published in slices:
        spec = published.get("spec", {})
        if spec.get("driver") != DRIVER:
            continue
        pool = spec.get("pool", {}).get("name", "")
        for device in spec.get("devices", []):
            attributes = device.get("attributes", {})
            if ATTR_CPU_ID in attributes:
                devices[(pool, device["name"])] = CPUSet([int(attributes[ATTR_CPU_ID]["int"])])
            elif ATTR_NUMA_NODE in attributes:
                node = int(attributes[ATTR_NUMA_NODE]["int"])
                devices[(pool, device["name"])] = numa_cpus.get(node, CPUSet())
    return devices


def _results(claim: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The dra.cpu devices the claim is allocated, as the API server has them."""
    allocation = claim.get("status", {}).get("allocation") or {}
    return [r for r in allocation.get("devices", {}).get("results", []) if r["driver"] == DRIVER]


def allocated(claims: Iterable[Mapping[str, Any]]) -> set[str]:
    """The uids of the claims allocated dra.cpu devices, published or not (a node's slices are
    away for a while when its driver restarts: the kubelet removes them, the driver publishes
    them again)."""
    return {claim["metadata"]["uid"] for claim in claims if _results(claim)}


def grants(
    claims: Iterable[Mapping[str, Any]], devices: Mapping[tuple[str, str], CPUSet]
) -> dict[str, Grant]:
    """Claim uid -> Grant, for every claim allocated dra.cpu devices that are published."""
    found: dict[str, Grant] = {}
    for claim in claims:
        results = _results(claim)
        if not results:
            continue
        within, count, names = CPUSet(), 0, []
        for result in results:
            cpus = devices.get((result["pool"], result["device"]))
            if cpus is None:
                break  # not (or no longer) published: nothing to judge it by
            within = within | cpus
            consumed = (result.get("consumedCapacity") or {}).get(CPU_CAPACITY)
            taken = _quantity(str(consumed)) if consumed is not None else len(cpus)
            count += taken
            names.append((f"{result['pool']}/{result['device']}", taken))
        else:
            meta = claim["metadata"]
            found[meta["uid"]] = Grant(
                meta["uid"], f"{meta['namespace']}/{meta['name']}", within, count, tuple(names)
            )
    return found


def over_allocated(
    granted: Iterable[Grant], devices: Mapping[tuple[str, str], CPUSet]
) -> list[str]:
    """Devices holding more than they have: each named with the claims that share it."""
    by_device: dict[str, list[tuple[Grant, int]]] = {}
    for grant in granted:
        for device, taken in grant.devices:
            by_device.setdefault(device, []).append((grant, taken))
    sizes = {f"{pool}/{name}": len(cpus) for (pool, name), cpus in devices.items()}
    offences = []
    for device, holders in sorted(by_device.items()):
        if sum(taken for _, taken in holders) > sizes.get(device, 0):
            offences.append(f"{device}: {sorted(g.name for g, _ in holders)}")
    return offences


def claims_of_containers(pod: Mapping[str, Any]) -> dict[str, list[str]]:
    """Container name -> the names of the ResourceClaims it uses (through the pod's
    resourceClaims and, for templates, the claim names in its status)."""
    spec, status = pod.get("spec", {}), pod.get("status", {})
    generated = {
        s["name"]: s.get("resourceClaimName") for s in status.get("resourceClaimStatuses", [])
    }
    by_entry: dict[str, str] = {}
    for entry in spec.get("resourceClaims", []):
        name = entry.get("resourceClaimName") or generated.get(entry["name"])
        if name:
            by_entry[entry["name"]] = name
    used: dict[str, list[str]] = {}
    for container in [*spec.get("initContainers", []), *spec.get("containers", [])]:
        claims = container.get("resources", {}).get("claims", [])
        names = [by_entry[c["name"]] for c in claims if c["name"] in by_entry]
        used[container["name"]] = names
    return used


@dataclass
class Counts:
    """The judge's verdicts: each set names what it is about."""

    cpus_in_two_claims: set[str] = field(default_factory=set)
    off_cpuset: set[str] = field(default_factory=set)
    claims_lost: set[str] = field(default_factory=set)
    pods_stuck: set[str] = field(default_factory=set)
    strays: set[str] = field(default_factory=set)

    def as_numbers(self) -> dict[str, int]:
        return {
            "cpus_in_two_claims": len(self.cpus_in_two_claims),
            "off_cpuset_past_bound": len(self.off_cpuset),
            "acknowledged_claims_lost": len(self.claims_lost),
            "pods_stuck": len(self.pods_stuck),
            "strays_past_bound": len(self.strays),
        }

    def offences(self) -> list[str]:
        return sorted(
            f"{kind}: {what}"
            for kind, found in (
                ("CPU in two claims", self.cpus_in_two_claims),
                ("off its cpuset", self.off_cpuset),
                ("acknowledged claim lost", self.claims_lost),
                ("pod stuck", self.pods_stuck),
                ("stray", self.strays),
            )
            for what in found
        )


@dataclass
class ApiView:
    """One read of the API server."""

    pods: list[dict[str, Any]]
    claims: list[dict[str, Any]]
    slices: list[dict[str, Any]]

    @staticmethod
    def from_list(items: Sequence[Mapping[str, Any]]) -> ApiView:
        """From one `kubectl get pods,resourceclaims,resourceslices -A -o json` list."""
        by_kind: dict[str, list[dict[str, Any]]] = {
            "Pod": [],
            "ResourceClaim": [],
            "ResourceSlice": [],
        }
        for item in items:
            by_kind.setdefault(str(item.get("kind")), []).append(dict(item))
        return ApiView(by_kind["Pod"], by_kind["ResourceClaim"], by_kind["ResourceSlice"])


class Judge:
    """Counts what the module docstring lists over successive samples. `namespaces` are the
    workload's (whose pods must not get stuck); every container of the node is judged."""

    def __init__(self, bound: float, numa_cpus: Mapping[int, CPUSet], namespaces: Sequence[str]):
        self.bound = bound
        self.numa_cpus = dict(numa_cpus)
        self.namespaces = tuple(namespaces)
        self.counts = Counts()
        self.last_fault = 0.0
        self.samples = 0
        self.acknowledged: dict[str, CPUSet] = {}  # claim uid -> its CPUs
        self._off_since: dict[str, float] = {}
        self._pinned_elsewhere_since: dict[str, float] = {}
        self._stray_since: dict[str, float] = {}
        self._strays_counted: set[str] = set()  # one count per stray, whatever its CPUs then
        self.strays_seen: set[str] = set()  # every stray ever seen, on claimed CPUs or not
        self.unsettled: list[str] = []  # what the latest sample found not yet as it should be
        # Wall-clock time by which all of that must be as it should be, or be counted: each
        # item's bound runs from the later of when it began (first seen off, created, deleted)
        # and the last fault. 0 when the latest sample found everything settled.
        self.settle_by = 0.0
        self._since: list[float] = []  # when each unsettled item of the sample under way began

    def fault(self, at: float) -> None:
        self.last_fault = max(self.last_fault, at)

    def _past_bound(self, since: float, now: float) -> bool:
        return now - max(since, self.last_fault) > self.bound

    def sample(
        self,
        api: ApiView,
        kernel: Iterable[Seen],
        now: float,
        strays: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        """One sample: the API server's view, the kernel's view of every running container,
        and (when read) the processes of the pods' cgroups no live task accounts for."""
        self.samples += 1
        unsettled: list[str] = []
        devices = published_devices(api.slices, self.numa_cpus)
        granted = grants(api.claims, devices)
        by_name = {g.name: g for g in granted.values()}
        for offence in over_allocated(granted.values(), devices):
            self.counts.cpus_in_two_claims.add(f"API server: {offence}")
        pods = {f"{p['metadata']['namespace']}/{p['metadata']['name']}": p for p in api.pods}
        kernel = list(kernel)
        seen = [s for s in kernel if f"{s.namespace}/{s.pod}" in pods]
        by_uid = {p["metadata"].get("uid", ""): key for key, p in pods.items()}
        stray: dict[str, tuple[str, CPUSet, str]] = {}  # what -> (its pod, CPUs, why a stray)
        for cgroup, processes in (strays or {}).items():
            pod_key = by_uid.get(pod_uid(cgroup), "")
            stray[cgroup] = (pod_key, CPUSet.parse(processes["cpus"]), f"pids {processes['pids']}")
        for s in kernel:
            if f"{s.namespace}/{s.pod}" not in pods:
                stray[s.key] = ("", s.cpus_allowed, "its pod not in the API server")
        held: dict[str, Grant] = {}  # container key -> the claim it holds (one claim: judged)
        for s in seen:
            pod = pods[f"{s.namespace}/{s.pod}"]
            names = claims_of_containers(pod).get(s.container, [])
            found = [by_name.get(f"{s.namespace}/{n}") for n in names]
            if len(found) == 1 and found[0] is not None:
                held[s.key] = found[0]
            elif names:
                held[s.key] = Grant("", "", CPUSet(), -1, ())  # claims not all resolvable
        uids = {f"{c['metadata']['namespace']}/{c['metadata']['name']}": c["metadata"]["uid"]
                for c in api.claims}  # fmt: skip
        self._judge_claims(pods, granted, allocated(api.claims), uids, seen, held, now)
        self._since = []
        self._judge_containers(pods, seen, held, now, unsettled)
        self._judge_pods(pods, seen, held, now, unsettled)
        self._judge_strays(stray, pods, uids, held, now, unsettled)
        self.unsettled = unsettled
        self.settle_by = max([self.last_fault, *self._since]) + self.bound if unsettled else 0.0

    def _judge_claims(
        self,
        pods: Mapping[str, Mapping[str, Any]],
        granted: Mapping[str, Grant],
        allocated_uids: set[str],
        uids: Mapping[str, str],
        seen: Sequence[Seen],
        held: Mapping[str, Grant],
        now: float,
    ) -> None:
        pinned: dict[str, CPUSet] = {}  # claim uid -> CPUs its containers are pinned to
        for s in seen:
            grant = held.get(s.key)
            if grant is None or not grant.uid:
                continue
            pod = pods[f"{s.namespace}/{s.pod}"]
            running = pod.get("status", {}).get("phase") == "Running"
            if s.cpus_allowed == s.cpus_effective and grant.could_hold(s.cpus_allowed):
                pinned.setdefault(grant.uid, s.cpus_allowed)
                if running and grant.uid not in self.acknowledged:
                    self.acknowledged[grant.uid] = s.cpus_allowed
            acknowledged = self.acknowledged.get(grant.uid)
            if acknowledged is not None and s.cpus_allowed != acknowledged:
                since = self._pinned_elsewhere_since.setdefault(s.key, now)
                if self._past_bound(since, now):
                    self.counts.claims_lost.add(f"{grant.name} ({s.key} on {s.cpus_allowed})")
            else:
                self._pinned_elsewhere_since.pop(s.key, None)
        holders = sorted(pinned)
        for i, first in enumerate(holders):
            for second in holders[i + 1 :]:
                shared = pinned[first] & pinned[second]
                if shared:
                    names = sorted((granted[first].name, granted[second].name))
                    self.counts.cpus_in_two_claims.add(f"kernel: CPUs {shared} in {names}")
        # An acknowledged claim whose pod runs on stays allocated, and its pod does not fail.
        for key, pod in pods.items():
            if pod["metadata"].get("deletionTimestamp"):
                continue
            failed = pod.get("status", {}).get("phase") == "Failed"
            for names in claims_of_containers(pod).values():
                for name in names:
                    claim_key = f"{pod['metadata']['namespace']}/{name}"
                    uid = uids.get(claim_key, "")
                    if uid not in self.acknowledged:
                        continue
                    if failed:
                        reason = pod.get("status", {}).get("reason", "")
                        self.counts.claims_lost.add(f"{claim_key} (pod {key} Failed: {reason})")
                    elif uid not in allocated_uids:
                        phase = pod.get("status", {}).get("phase", "")
                        self.counts.claims_lost.add(
                            f"{claim_key} (deallocated, pod {key} on, {phase})"
                        )

    def _judge_containers(
        self,
        pods: Mapping[str, Mapping[str, Any]],
        seen: Sequence[Seen],
        held: Mapping[str, Grant],
        now: float,
        unsettled: list[str],
    ) -> None:
        claimed = CPUSet()
        for cpus in self._held_cpus(held).values():
            claimed = claimed | cpus
        current = set()
        for s in seen:
            grant = held.get(s.key)
            why = ""
            if s.cpus_allowed != s.cpus_effective:
                why = f"Cpus_allowed_list {s.cpus_allowed} != cgroup {s.cpus_effective}"
            elif grant is not None and grant.count < 0:
                continue  # claims the API server view cannot resolve: nothing to judge by
            elif grant is not None:
                want = self.acknowledged.get(grant.uid)
                if want is not None and s.cpus_allowed != want:
                    why = f"on {s.cpus_allowed}, its claim {grant.name} holds {want}"
                elif want is None and not grant.could_hold(s.cpus_allowed):
                    why = (
                        f"on {s.cpus_allowed}, its claim {grant.name}: "
                        f"{grant.count} of {grant.within}"
                    )
            elif s.cpus_allowed & claimed:
                why = f"shared, on claimed CPUs {s.cpus_allowed & claimed}"
            if not why:
                self._off_since.pop(s.key, None)
                continue
            current.add(s.key)
            since = self._off_since.setdefault(s.key, now)
            unsettled.append(f"{s.key}: {why}")
            self._since.append(since)
            if self._past_bound(since, now):
                self.counts.off_cpuset.add(f"{s.key}: {why}")
        for key in set(self._off_since) - current:
            del self._off_since[key]

    def _judge_pods(
        self,
        pods: Mapping[str, Mapping[str, Any]],
        seen: Sequence[Seen],
        held: Mapping[str, Grant],
        now: float,
        unsettled: list[str],
    ) -> None:
        running: dict[str, set[str]] = {}
        for s in seen:
            running.setdefault(f"{s.namespace}/{s.pod}", set()).add(s.container)
        for key, pod in pods.items():
            meta = pod["metadata"]
            if meta["namespace"] not in self.namespaces:
                continue
            deleted = _timestamp(meta.get("deletionTimestamp"))
            if deleted is not None:
                grace = float(meta.get("deletionGracePeriodSeconds") or 0)
                unsettled.append(f"{key}: deleted, still present")
                self._since.append(deleted - grace)
                if self._past_bound(deleted - grace, now):
                    self.counts.pods_stuck.add(f"{key} ({meta['uid']}): not gone")
                continue
            created = _timestamp(meta.get("creationTimestamp")) or now
            phase = pod.get("status", {}).get("phase")
            wanted = {c["name"] for c in pod.get("spec", {}).get("containers", [])}
            if phase == "Running" and wanted <= running.get(key, set()):
                continue
            missing = sorted(wanted - running.get(key, set()))
            unsettled.append(f"{key}: {phase}, not running {missing}")
            self._since.append(created)
            if self._past_bound(created, now):
                self.counts.pods_stuck.add(f"{key} ({meta['uid']}): {phase}, not running {missing}")

    def _held_cpus(self, held: Mapping[str, Grant]) -> dict[str, CPUSet]:
        """The acknowledged CPUs of every claim a running container holds, by claim uid."""
        return {
            g.uid: self.acknowledged[g.uid] for g in held.values() if g.uid in self.acknowledged
        }

    def _judge_strays(
        self,
        stray: Mapping[str, tuple[str, CPUSet, str]],
        pods: Mapping[str, Mapping[str, Any]],
        uids: Mapping[str, str],
        held: Mapping[str, Grant],
        now: float,
        unsettled: list[str],
    ) -> None:
        """A stray counts once it has been on CPUs a claim of another pod holds (acknowledged,
        its container running) for the bound."""
        held_cpus = self._held_cpus(held)
        claimed = CPUSet()
        for cpus_of_claim in held_cpus.values():
            claimed = claimed | cpus_of_claim
        self.strays_seen.update(stray)
        offending_now = set()
        for what, (pod_key, cpus, why) in stray.items():
            own = CPUSet()  # what the stray's own pod holds: a lost container of a pod on
            if pod_key:  # its own claim takes nothing from anybody
                namespace = pod_key.partition("/")[0]
                for names in claims_of_containers(pods[pod_key]).values():
                    for name in names:
                        own = own | held_cpus.get(uids.get(f"{namespace}/{name}", ""), CPUSet())
            on = cpus & (claimed - own)
            if not on:
                continue
            offending_now.add(what)
            since = self._stray_since.setdefault(what, now)
            unsettled.append(f"{what}: stray ({why}) on claimed CPUs {on.format()}")
            self._since.append(since)
            if self._past_bound(since, now) and what not in self._strays_counted:
                self._strays_counted.add(what)
                self.counts.strays.add(f"{what}: stray ({why}) on claimed CPUs {on.format()}")
        for what in set(self._stray_since) - offending_now:
            del self._stray_since[what]
