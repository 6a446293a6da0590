"""What the agent does in the guest. Every function takes the guest's state folder as `state`
(the agent passes it) and answers plain JSON.

One bed at a time lives here: a real containerd 2.4.2 + runc (harness ContainerdNode; or CRI-O
1.34 + conmon + runc, harness CrioNode, when the host runs the tier with DRACPU_RUNTIME=crio),
NRI request and registration timeouts raised to 30 s (under emulation the default 2 s expire
and a claimed container would start on every CPU before being pinned), with the five services
of this checkout and the kubelet simulator attached as tests/skew runs them (one process each,
so one can be replaced while the others run: the upgrade walk-through). It is started once and
kept: process starts are what emulation makes slowest. Claims go through the kubelet simulator
from this process (`dracpu.dev.workloads`), containers through crictl, and every answer about
a container is the guest kernel's own view (`kernel_view`).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import skew_bench
import skew_stack
from guest_netpol import network_policy_pods as network_policy_pods
from guest_netpol import network_policy_start as network_policy_start
from guest_netpol import network_policy_stop as network_policy_stop
from guest_netpol import network_policy_verdicts as network_policy_verdicts
from harness.cgroups import CGROUP_ROOT, Cgroups
from harness.containerd_node import ContainerdNode, crictl_path
from harness.dev_up import DevUp, free_port
from harness.guest import KUBELET_PORT, NODE_IP, POD_CIDR
from harness.realnode_stack import RUNTIMES, make_node
from harness.runtime_tasks import (
    pod_processes,
    running_tasks,
    runtime_process,
    status_field,
    stray_processes,
)
from harness.waits import wait_for
from shape import machine_shape
from skew_builds import Build, head_build
from skew_stack import Stack

from dracpu.allocator.domain.memory_flags import memory_flags
from dracpu.core.cpuset import CPUSet
from dracpu.core.errors import DracpuError
from dracpu.dev import workloads
from dracpu.dev.apiserver.client import ClusterClient
from dracpu.dev.layout import RunLayout
from dracpu.dev.scheduler import allocate_claim, devices_of, memory_devices_of, results_of
from dracpu.dev.sim_clients import KubeletClient

BASE = Path("/tmp/dracpu-bn")
NAMESPACE = "bignode"
NRI_TIMEOUT = "30s"
READY_TIMEOUT = 300.0
# The harness's waits scale with the speed it measures in the guest (harness.speed); a
# service's start or stop under emulation is slower still than that pure-Python measure says
# (10-40 s: imports, disk), so the guest's copy of these waits longer.
skew_stack.READY_TIMEOUT = READY_TIMEOUT
skew_stack.STOP_TIMEOUT = 60.0
# Each readiness check is a gRPC or HTTP call from this process: polled every 50 ms, as on a
# host, they take emulated CPU from the services that are starting.
skew_stack.READY_POLL = 0.25
skew_bench.SETTLE_TIMEOUT = READY_TIMEOUT
# The kubelet simulator waits this long for a restarting dra-plugin (the kubelet keeps retrying
# a pod's prepare; a replaced dra-plugin takes 10-40 s to register again here).
os.environ["DRACPU_KUBELET_SIM_PLUGIN_WAIT"] = "120"
CGROUPS = Cgroups()
# The bed's driver configuration when a module asks for none: memory devices published, so a
# claim can hold a NUMA node's memory and hugepages (the CPU devices are the same without it).
DEFAULT_CONFIG = "publishMemoryDevices: true\n"
# 2 MiB hugepages reserved per NUMA node before the services start, so the topology read at
# start publishes them (of the 1.5 GiB of each node).
HUGEPAGES_2MI = {0: 64, 1: 32}
NODE_SYSFS = Path("/sys/devices/system/node")

_bed: dict[str, Any] = {}
_lock = threading.Lock()


# -- the kernel's view -------------------------------------------------------------------------


def kernel_view(pid: int, state: Path | None = None) -> dict[str, Any]:
    """What the guest kernel says process `pid` may run on and allocate from: its own masks
    and its cgroup's effective cpuset and memory nodes (the core's cgroup reader)."""
    return {
        "pid": pid,
        "cpus_allowed": CPUSet.parse(status_field(pid, "Cpus_allowed_list")).format(),
        "mems_allowed": CPUSet.parse(status_field(pid, "Mems_allowed_list")).format(),
        "cgroup": str(CGROUPS.directory(pid, "cpuset").relative_to(CGROUP_ROOT)),
        "cpus_effective": CPUSet.parse(CGROUPS.cpus(pid)).format(),
        "mems_effective": CPUSet.parse(CGROUPS.mems(pid)).format(),
    }


def kernel(state: Path) -> dict[str, Any]:
    """The guest kernel's own facts: cgroup mode and controllers, online CPUs, NUMA distances."""
    node_dir = Path("/sys/devices/system/node")
    nodes = sorted(int(p.name[4:]) for p in node_dir.glob("node[0-9]*"))
    return {
        "release": os.uname().release,
        "cgroup2": (CGROUP_ROOT / "cgroup.controllers").exists(),
        "subtree_control": (CGROUP_ROOT / "cgroup.subtree_control").read_text().split(),
        "online": Path("/sys/devices/system/cpu/online").read_text().strip(),
        "distances": {
            str(n): [int(d) for d in (node_dir / f"node{n}" / "distance").read_text().split()]
            for n in nodes
        },
        "node_cpus": {
            str(n): CPUSet.parse((node_dir / f"node{n}" / "cpulist").read_text()).format()
            for n in nodes
        },
    }


def topology(state: Path) -> dict[str, Any]:
    return machine_shape("/sys")


# -- the bed ---------------------------------------------------------------------------------


def _layout() -> RunLayout:
    stack: Stack = _bed["stack"]
    return stack.layout


def _head() -> Build:
    if "head" not in _head_cache:
        _head_cache["head"] = head_build()
    return _head_cache["head"]


_head_cache: dict[str, Build] = {}


def start(state: Path, config: str = "", runtime: str = "containerd") -> dict[str, Any]:
    """The runtime (`runtime`: containerd or crio) first (its NRI socket must be there when
    the nri-plugin dials), then the services one by one, each until ready (docs/dev/bignode.md:
    started together, they once hung the guest); a no-op when the bed runs with the same
    `config` (driver configuration YAML) and runtime. Another `config` restarts the services
    alone, on a fresh run folder, beside the running runtime; another runtime restarts all.
    Answers how long the runtime and the services took, and the runtime's name and version."""
    if runtime not in RUNTIMES:
        raise ValueError(f"runtime must be one of {', '.join(RUNTIMES)}, not {runtime!r}")
    with _lock:
        same = _bed.get("config") == config and _bed.get("runtime") == runtime
        if _bed and same and not _bed["stack"].exited():
            return {"runtime_s": 0.0, "services_s": 0.0, "reused": True} | _bed["version"]
        node: ContainerdNode | None = _bed.get("node")
        if node is not None and node.running and _bed.get("runtime") == runtime:
            _stop_services(state)
        else:
            _stop_bed(state)
            shutil.rmtree(BASE, ignore_errors=True)
            node = None
        BASE.mkdir(parents=True, exist_ok=True)
        _reserve_hugepages()
        config_file = BASE / "config.yaml"
        config_file.write_text(config or DEFAULT_CONFIG)
        head = _head()
        builds = {name: head for name in (*skew_stack.DRIVER_SERVICES, "apiserver", "kubelet-sim")}
        stack = Stack(
            BASE / "rd", Path("/sys"), free_port(), builds, runtime_sim=False, config=config_file
        )
        began = time.monotonic()
        if node is None:
            node = make_node(BASE / "node", BASE / "rd", name=runtime, nri_timeout=NRI_TIMEOUT)
            node.start(timeout=120)
            # Asked once per runtime start: crictl is one more process start under emulation.
            version = {"runtime": node.runtime_name, "version": node.runtime_version()}
        else:
            version = _bed["version"]
        started = time.monotonic()
        _bed.update(
            node=node,
            stack=stack,
            config=config,
            runtime=runtime,
            version=version,
            pods=[],
            claims=[],
        )
        stack.start_all()
        return {
            "runtime_s": round(started - began, 1),
            "services_s": round(time.monotonic() - started, 1),
            "reused": False,
        } | version


def _reserve_hugepages() -> None:
    """Each node's pool of 2 MiB pages set to HUGEPAGES_2MI (the kernel may give fewer when
    the node's memory is fragmented: that is refused here, not found out by a test)."""
    for numa, pages in HUGEPAGES_2MI.items():
        pool = NODE_SYSFS / f"node{numa}/hugepages/hugepages-2048kB/nr_hugepages"
        pool.write_text(f"{pages}\n")
        got = int(pool.read_text())
        if got != pages:
            raise RuntimeError(f"{pool}: asked for {pages} pages, the kernel reserved {got}")


def _stop_services(state: Path) -> None:
    """The services stopped and their run folder emptied but for what the running containerd
    holds there (the folders of its NRI socket and its CDI specs, the specs removed);
    containerd, with no pods left by the scenarios (`clean`), keeps running."""
    node: ContainerdNode = _bed["node"]
    try:
        with contextlib.suppress(AssertionError):
            _bed["stack"].stop_all()
        _keep_logs(state)
    finally:
        for entry in node.run_dir.iterdir():
            if entry in (node.nri_socket.parent, node.cdi_dir):
                for spec in entry.glob("*.json") if entry == node.cdi_dir else ():
                    spec.unlink(missing_ok=True)
            elif entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
        (BASE / "config.yaml").unlink(missing_ok=True)


def _stop_bed(state: Path) -> None:
    if not _bed:
        return
    try:
        _bed["node"].teardown()
    finally:
        with contextlib.suppress(AssertionError):
            _bed["stack"].stop_all()
        _keep_logs(state)
        _bed.clear()


def _keep_logs(state: Path) -> None:
    """The services' and the runtime's logs into the state folder, where the host reads them."""
    target = state / "logs"
    target.mkdir(parents=True, exist_ok=True)
    runtime_logs = [BASE / "node/containerd.log", BASE / "node/crio.log"]
    for log in [*BASE.glob("rd/logs/*.log"), *runtime_logs]:
        with contextlib.suppress(OSError):
            shutil.copy(log, target / log.name)


def logs(state: Path) -> bool:
    _keep_logs(state)
    return True


def stop(state: Path) -> bool:
    with _lock:
        _stop_bed(state)
    return True


def shutdown(state: Path) -> None:
    stop(state)


def reboot(state: Path) -> None:
    """The guest rebooted at once, as `reboot -f` does: the file systems synced, nothing
    stopped first (the containers, containerd, the kubelet and the driver die with the
    machine); qemu resets it and the kernel boots again."""
    subprocess.run(["sync"], check=False, timeout=120)
    subprocess.run(["/bin/busybox", "reboot", "-f"], check=False, timeout=60)
    time.sleep(60)  # the reset comes first
    raise RuntimeError("the guest did not reboot")


def devices(state: Path) -> list[dict[str, Any]]:
    """The devices the dra-plugin published (its ResourceSlices in the run's API-server fake)."""
    with contextlib.closing(ClusterClient(_layout().apiserver_kubeconfig)) as cluster:
        found = devices_of(cluster.slices())
    return [
        {"name": d.name, "numa": d.numa, "capacity": d.capacity}
        | {"cpu_ids": d.cpu_ids.format() if d.cpu_ids is not None else None}
        for d in found
    ]


def _api() -> DevUp:
    """The API (and CDI spec) reader of the realnode harness, pointed at this bed."""
    stack: Stack = _bed["stack"]
    return DevUp(stack.layout.root, int(stack.address.rpartition(":")[2]))


def shared_pool(state: Path) -> str:
    """What the api serves as the shared pool. Under emulation its call to the allocator can
    miss its deadline while the guest is busy (503); asked again until it answers."""

    def answer() -> str | None:
        try:
            return CPUSet.parse(_api().shared_pool()).format()
        except urllib.error.HTTPError as exc:
            if exc.code == 503:
                return None
            raise RuntimeError(f"the api answered {exc.code} {exc.reason}") from exc

    return wait_for(answer, "the api's shared pool", timeout=60, interval=1)


def pod(state: Path, name: str) -> dict[str, str]:
    node: ContainerdNode = _bed["node"]
    pod_id = node.run_pod(name, namespace=NAMESPACE)
    _bed["pods"].append(pod_id)
    return {"id": pod_id, "uid": node.pod_uid(pod_id)}


def claim(
    state: Path,
    name: str,
    cpus: int,
    pod_uid: str,
    numa: int | None = None,
    cpuset: str | None = None,
    memory_placement: str | None = None,
    memory: str | None = None,
    hugepages: list[str] | None = None,
) -> dict[str, Any]:
    """A claim allocated by the scheduler simulator (with `cpuset`, as an external allocator
    names it, and `memory_placement`, both in the claim's opaque cpuConfig; with `memory` and
    `hugepages` as `dracpu dev claim` takes them, of the CPUs' NUMA node), prepared by the
    kubelet simulator."""
    made = asyncio.run(
        workloads.claim(
            _layout(),
            cpus=cpus,
            numa=numa,
            name=name,
            namespace=NAMESPACE,
            cpuset=cpuset,
            pod_uid=pod_uid,
            memory_placement=memory_placement,
            memory=memory,
            hugepages=hugepages or (),
        )
    )
    _bed["claims"].append(name)
    dev = _api()
    return {
        "name": made.name,
        "uid": made.uid,
        "cpuset": CPUSet.parse(made.cpuset).format(),
        "devices": list(made.devices),
        "cdi": list(dev.cdi_devices(made.uid)),
    }


def stale_claim(
    state: Path, name: str, cpus: int, pod_uid: str, numa: int, hugepages: list[str]
) -> dict[str, Any]:
    """A claim of `cpus` CPUs and `hugepages` on node `numa` allocated as by a scheduler that
    has not yet seen the node's other claims (against the published capacities alone), then
    prepared by the kubelet simulator. Answers whether the scheduler simulator, which sees
    them, refuses it too, the prepare's error ("" when it succeeded; the claim is released
    again either way) and the claim's uid."""
    layout = _layout()
    with contextlib.closing(ClusterClient(layout.apiserver_kubeconfig)) as cluster:
        return _stale_claim(layout, cluster, name, cpus, pod_uid, numa, hugepages)


def _stale_claim(
    layout: RunLayout,
    cluster: ClusterClient,
    name: str,
    cpus: int,
    pod_uid: str,
    numa: int,
    hugepages: list[str],
) -> dict[str, Any]:
    wants = memory_flags(None, hugepages)
    cpu_devices, memory_devices = devices_of(cluster.slices()), memory_devices_of(cluster.slices())
    try:
        allocate_claim(
            cpu_devices, memory_devices, results_of(cluster.claims()), cpus, wants,
            numa=numa,
        )  # fmt: skip
        scheduler = ""
    except DracpuError as exc:
        scheduler = str(exc)
    results = allocate_claim(cpu_devices, memory_devices, [], cpus, wants, numa=numa)
    uid = str(uuid.uuid4())
    document = workloads.claim_document(
        NAMESPACE, name, uid, cpus, results, cpu_devices[0].node, numa=numa, cpuset=None,
        pod_uid=pod_uid, memory=wants,
    )  # fmt: skip
    cluster.write_claim(document)
    kubelet = KubeletClient(layout.kubelet_sim_socket)
    try:
        asyncio.run(kubelet.prepare(NAMESPACE, name, uid))
        prepare = ""
        asyncio.run(kubelet.unprepare(NAMESPACE, name, uid))
    except DracpuError as exc:
        prepare = str(exc)
    finally:
        cluster.delete_claim(NAMESPACE, name)
    return {"uid": uid, "scheduler": scheduler, "prepare": prepare}


def release(state: Path, name: str) -> bool:
    asyncio.run(workloads.release(_layout(), name=name, namespace=NAMESPACE))
    with contextlib.suppress(ValueError):
        _bed["claims"].remove(name)
    return True


def _container_view(container_id: str) -> dict[str, Any]:
    """The kernel's view of a container's process, and the CPUs and memory nodes of the OCI
    spec containerd created it with (`linux.resources.cpu`; "" where unset), from one
    inspect."""
    node: ContainerdNode = _bed["node"]
    inspected = node.inspect(container_id)
    spec = inspected["info"]["runtimeSpec"]
    cpu = spec.get("linux", {}).get("resources", {}).get("cpu", {})
    return {
        "id": container_id,
        **kernel_view(int(inspected["info"]["pid"])),
        "spec_cpus": str(cpu.get("cpus", "")),
        "spec_mems": str(cpu.get("mems", "")),
    }


def container(state: Path, pod_id: str, name: str, cdi: list[str] | None = None) -> dict[str, Any]:
    """Create and start a container (with the CDI devices of its claims); its kernel view."""
    node: ContainerdNode = _bed["node"]
    made = node.run_container(pod_id, name, cdi_devices=cdi or ())
    return {"name": name, **_container_view(made.id)}


def _huge_pages_by_node(pid: int) -> dict[str, int]:
    """The process's hugetlb pages per NUMA node, summed over its `huge` mappings in
    /proc/<pid>/numa_maps (their `N<node>=<pages>` fields)."""
    pages: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/numa_maps").read_text().splitlines():
        fields = line.split()
        if "huge" not in fields:
            continue
        for field in fields:
            key, equals, value = field.partition("=")
            if equals and key[:1] == "N" and key[1:].isdigit():
                pages[key[1:]] = pages.get(key[1:], 0) + int(value)
    return pages


def hugepage_container(
    state: Path, pod_id: str, name: str, cdi: list[str], pages: int
) -> dict[str, Any]:
    """A container (with the CDI devices of its claims) whose process is the hugepage mapper
    (tests/bignode/hugepages.c, built by the host into `state/hugepages/`) holding `pages`
    2 MiB pages it wrote to; once numa_maps counts them all: its kernel view, its pages per
    node from numa_maps, and its cgroup's hugetlb and cpuset files."""
    node: ContainerdNode = _bed["node"]
    made = node.run_container(
        pod_id, name, cdi_devices=cdi, command=("/hugepages/hugepages", str(pages), "hold"),
        mounts={"/hugepages": str(state / "hugepages")},
    )  # fmt: skip
    seen = _container_view(made.id)
    by_node = wait_for(
        lambda: (found := _huge_pages_by_node(seen["pid"])) and sum(found.values()) == pages
        and found,
        f"{pages} hugepages in the numa_maps of {name}",
        timeout=120,
    )  # fmt: skip
    directory = CGROUPS.directory(seen["pid"], "hugetlb")
    files = (
        "hugetlb.2MB.max", "hugetlb.2MB.rsvd.max", "hugetlb.2MB.current", "cpuset.mems",
        "cpuset.mems.effective",
    )  # fmt: skip
    cgroup = {f: (directory / f).read_text().strip() for f in files if (directory / f).exists()}
    return {**seen, "huge_pages": by_node, "files": cgroup}


def hugepage_exec(state: Path, container_id: str, pages: int) -> dict[str, Any]:
    """The hugepage mapper run once more in the container (crictl exec, in its cgroup), mapping
    and writing `pages` 2 MiB pages: its exit code (crictl exits 1 and names it) and its
    line."""
    done = _bed["node"].crictl(
        "exec", container_id, "/hugepages/hugepages", str(pages), check=False
    )
    named = re.search(r"command terminated with exit code (\d+)", done.stderr)
    code = int(named.group(1)) if named else done.returncode
    return {"code": code, "output": done.stdout.strip(), "stderr": done.stderr.strip()[-500:]}


def view(state: Path, container_id: str) -> dict[str, Any]:
    return _container_view(container_id)


def env(state: Path, container_id: str) -> list[str]:
    return _bed["node"].exec(container_id, "env").splitlines()


def remove_pod(state: Path, pod_id: str) -> bool:
    _bed["node"].remove_pod(pod_id)
    with contextlib.suppress(ValueError):
        _bed["pods"].remove(pod_id)
    return True


def clean(state: Path) -> bool:
    """Remove every pod and release every claim the scenarios made (the bed stays up)."""
    for pod_id in list(_bed.get("pods", [])):
        remove_pod(state, pod_id)
    for name in list(_bed.get("claims", [])):
        release(state, name)
    return True


# -- the node of the guest's cluster ----------------------------------------------------------

CLUSTER_DIR = Path("/run/dracpu-node")
REPO = Path(__file__).resolve().parents[2]
IMAGE_DISK = Path("/dev/vda")


def cluster_node(
    state: Path,
    kubeconfig: str,
    images: str,
    node_name: str,
    pod_cidr: str = POD_CIDR,
    service_upstream: str = "",
) -> dict[str, Any]:
    """The bed stopped (the guest has room for one driver); then the node of the guest's
    cluster: the image disk mounted as containerd's root (its import stamps make the imports
    no-ops) and holding what a node keeps across a reboot, containerd with NRI timeouts of 30 s
    and a pod network on a CNI bridge (`pod_cidr`), and the kubelet on cgroup v2 listening on
    NODE_IP:KUBELET_PORT (`tools/bignode/node.sh up`, which saves these settings on the disk for
    the next boot and runs `tools/cluster.sh node`), registering with the host's API server
    through `kubeconfig`. With `service_upstream` the node relays the `kubernetes` Service
    address to it, for its pods (DRACPU_CLUSTER_SERVICE_UPSTREAM)."""
    stop(state)
    began = time.monotonic()
    if not IMAGE_DISK.is_block_device():
        raise RuntimeError("no image disk: the guest was booted without one")
    env = {
        **os.environ,
        "DRACPU_CLUSTER_DIR": str(CLUSTER_DIR),
        "DRACPU_CLUSTER_NODE_KUBECONFIG": kubeconfig,
        "DRACPU_CLUSTER_IMAGES": images,
        "DRACPU_CLUSTER_NODE_NAME": node_name,
        "DRACPU_CLUSTER_NODE_IP": NODE_IP,
        "DRACPU_CLUSTER_KUBELET_PORT": str(KUBELET_PORT),
        "DRACPU_CLUSTER_POD_CIDR": pod_cidr,
        "DRACPU_CLUSTER_NRI_TIMEOUT": NRI_TIMEOUT,
        "DRACPU_CLUSTER_SERVICE_UPSTREAM": service_upstream,
    }
    done = subprocess.run(
        ["bash", str(REPO / "tools/bignode/node.sh"), "up"],
        env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"tools/bignode/node.sh up: {done.stderr.strip()[-2000:]}")
    return {"seconds": round(time.monotonic() - began, 1), "log": done.stderr.splitlines()}


def cluster_logs(state: Path, into: str = "cluster") -> list[str]:
    """The cluster node's logs into the state folder (`logs/<into>/`: containerd's and the
    kubelet's, and every container's from /var/log/pods), where the host reads them after the
    guest is gone (or rebooted: they are on its /run). Answers the files copied."""
    target = state / "logs" / into
    target.mkdir(parents=True, exist_ok=True)
    copied = []
    sources = [*(CLUSTER_DIR / "logs").glob("*.log"), *Path("/var/log/pods").glob("*/*/*.log")]
    for log in sources:
        relative = log.relative_to(CLUSTER_DIR if log.is_relative_to(CLUSTER_DIR) else "/var/log")
        name = "_".join(relative.parts)
        with contextlib.suppress(OSError):
            shutil.copy(log, target / name)
            copied.append(name)
    return copied


def _crictl(*args: str) -> str:
    done = subprocess.run(
        [str(crictl_path()), "--config", str(CLUSTER_DIR / "crictl.yaml"), "--timeout", "60s",
         *args],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"crictl {args[0]}: {done.stderr.strip()}")
    return done.stdout


# containerd's task folders of the kubelet's namespace on the node (tools/cluster.sh `state`).
CLUSTER_TASKS = CLUSTER_DIR / "containerd" / "state" / "io.containerd.runtime.v2.task" / "k8s.io"


def cluster_containers(state: Path) -> dict[str, dict[str, Any]]:
    """Every running container of the guest's kubelet, by `namespace/pod/container`: the guest
    kernel's view of its process (`kernel_view`) and that process's environment."""
    views: dict[str, dict[str, Any]] = {}
    for key, pid in running_tasks(CLUSTER_TASKS).values():
        with contextlib.suppress(OSError, LookupError):  # ended in between
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            views[key] = {
                **kernel_view(pid),
                "env": dict(e.decode().partition("=")[::2] for e in environ if b"=" in e),
            }
    return views


def cluster_strays(state: Path) -> dict[str, list[int]]:
    """The processes of the kubelet's pod cgroups that no live task of containerd accounts
    for, by cgroup (harness.runtime_tasks.stray_processes)."""
    return stray_processes(CLUSTER_TASKS)


def cpu_online(state: Path, cpu: int, online: bool) -> str:
    """CPU `cpu` taken offline or brought back (its sysfs `online` file, as the kernel's CPU
    hotplug does it); answers the kernel's list of online CPUs afterwards."""
    (Path(f"/sys/devices/system/cpu/cpu{cpu}") / "online").write_text("1\n" if online else "0\n")
    return Path("/sys/devices/system/cpu/online").read_text().strip()


def driver_api(state: Path, address: str, port: int, path: str) -> Any:
    """GET `path` of the driver's api, which the driver's pod serves on its pod IP `address`
    and `port` (the pod network is reached from the guest alone); its JSON."""
    url = f"http://{address}:{port}{path}"
    with urllib.request.urlopen(url, timeout=60) as reply:
        return json.loads(reply.read())


_watch: dict[str, Any] = {}


def _pod_cgroup_cpus() -> dict[str, CPUSet]:
    """Every process in a cgroup of the kubelet's pods (`pod_processes`), by that cgroup's last
    name (a container's or a sandbox's id, or `pod<uid>`): the CPUs the kernel lets it run on."""
    seen: dict[str, CPUSet] = {}
    for _pid, cgroup, cpus in pod_processes(cgroup_root=CGROUP_ROOT):
        name = cgroup.rstrip("/").rpartition("/")[2]
        seen[name] = seen.get(name, CPUSet()) | cpus
    return seen


def watch_start(state: Path, interval: float = 0.1) -> bool:
    """Sample every pod process's CPUs (`_pod_cgroup_cpus`) every `interval` seconds in a
    thread until `watch_stop`, keeping for each cgroup every CPU it was ever seen on."""
    watch_stop(state)
    stop = threading.Event()
    union: dict[str, CPUSet] = {}
    counts = {"samples": 0}

    def sample() -> None:
        while not stop.is_set():
            for name, cpus in _pod_cgroup_cpus().items():
                union[name] = union.get(name, CPUSet()) | cpus
            counts["samples"] += 1
            stop.wait(interval)

    thread = threading.Thread(target=sample, name="cpu-watch", daemon=True)
    _watch.update(stop=stop, thread=thread, union=union, counts=counts)
    thread.start()
    return True


def container_attempts(state: Path) -> dict[str, dict[str, Any]]:
    """Every running container of the guest's kubelet, by `namespace/pod/container`: its id
    and attempt (the kubelet's restart count of that container, as the runtime has it)."""
    listed = json.loads(_crictl("ps", "--state", "running", "-o", "json"))["containers"]
    found: dict[str, dict[str, Any]] = {}
    for item in listed:
        labels = item["labels"]
        key = "/".join(
            labels[f"io.kubernetes.{k}"] for k in ("pod.namespace", "pod.name", "container.name")
        )
        found[key] = {"id": item["id"], "attempt": int(item["metadata"].get("attempt", 0))}
    return found


def uptime(state: Path) -> float:
    """Seconds since the guest's kernel started."""
    return float(Path("/proc/uptime").read_text().split()[0])


# -- the node's containers sampled from the kernel alone ----------------------------------------

# A sample every this many seconds (a walk of /proc: no process started).
SAMPLE_INTERVAL = 0.5
_sampler: dict[str, Any] = {}


def _container_processes() -> dict[str, tuple[int, str]]:
    """The first process of every kubelet container, by its cgroup's last component (the
    container id), with that cgroup's path; sandboxes' pause processes and runc's own (in the
    cgroup before the container's command runs, without its environment) left out."""
    found: dict[str, tuple[int, str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            line = (entry / "cgroup").read_text().strip().splitlines()[-1]
            path = line.split("::", 1)[-1]
            comm = (entry / "comm").read_text().strip()
            if "kubepods" not in path or comm == "pause" or runtime_process(entry, comm):
                continue
            found.setdefault(path.rsplit("/", 1)[-1], (int(entry.name), path))
    return found


def _process_cpus(pid: int, proc: Path = Path("/proc")) -> tuple[CPUSet, CPUSet, CPUSet]:
    """A process's Cpus_allowed_list, its cgroup's cpuset.cpus.effective, and the CPUs of the
    claims its environment names (DRA_CPUSET_<uid>). A LookupError for a process that is
    exiting: its memory, and with it its environment, is gone (the kernel reads an empty
    environ), so the claims it held can no longer be told."""
    environ = (proc / str(pid) / "environ").read_bytes()
    if not environ:
        raise LookupError(f"process {pid} is exiting: its environment is gone")
    allowed = CPUSet.parse(status_field(pid, "Cpus_allowed_list", proc))
    effective = CPUSet.parse(CGROUPS.cpus(pid))
    held = CPUSet()
    for item in environ.split(b"\0"):
        key, _, value = item.decode(errors="replace").partition("=")
        if key.startswith("DRA_CPUSET_"):
            held = held | CPUSet.parse(value)
    return allowed, effective, held


def _sample(claims: dict[str, CPUSet], record: dict[str, Any]) -> None:
    """One sample: each container's Cpus_allowed_list (equal, when read, to its cgroup's
    cpuset.cpus.effective) against the claims it holds (DRA_CPUSET_<uid> in its environment)."""
    now = float(Path("/proc/uptime").read_text().split()[0])
    record["samples"] += 1
    all_claimed = CPUSet()
    for cpus in claims.values():
        all_claimed = all_claimed | cpus
    for cid, (pid, path) in _container_processes().items():
        try:
            allowed, effective, held = _process_cpus(pid)
        except (OSError, LookupError, DracpuError):
            continue  # ended in between
        seen = record["containers"].setdefault(
            cid,
            {"cgroup": path, "first_seen": now, "claimed": held.format(), "pinned_at": None,
             "off_samples": 0, "samples": 0},
        )  # fmt: skip
        seen["samples"] += 1
        seen["last_seen"] = now
        seen["cpus"] = allowed.format()
        if allowed != effective:
            continue  # moving between the two reads
        # Off its cpuset: a claimed container on other CPUs than its claims', an unclaimed one
        # on a claim's CPUs. On CPUs of a claim it does not hold: a violation at any time.
        off = allowed != held if held else bool(allowed & all_claimed)
        others = all_claimed - held
        if held and allowed & others:
            record["violations"].append(
                {"at": now, "container": cid, "cpus": allowed.format(),
                 "holds": held.format(), "of_other_claims": (allowed & others).format()}
            )  # fmt: skip
        if off:
            seen["off_samples"] += 1
        elif seen["pinned_at"] is None:
            seen["pinned_at"] = now


def sampler_start(state: Path, claims: dict[str, str]) -> bool:
    """Sample every kubelet container's kernel view each SAMPLE_INTERVAL in a thread of the
    agent until `sampler_stop`: `claims` (claim uid to CPUs) are the CPUs no container but the
    claim's holders may run on. Reads /proc and the cgroup tree only: no process started."""
    sampler_stop(state)
    held = {uid: CPUSet.parse(cpus) for uid, cpus in claims.items()}
    record: dict[str, Any] = {
        "started_at": float(Path("/proc/uptime").read_text().split()[0]),
        "samples": 0,
        "containers": {},
        "violations": [],
        "errors": [],
    }
    stop = threading.Event()

    def run() -> None:
        while not stop.is_set():
            try:
                _sample(held, record)
            except Exception as exc:  # kept and answered: the test fails on it
                record["errors"].append(f"{type(exc).__name__}: {exc}")
            stop.wait(SAMPLE_INTERVAL)

    thread = threading.Thread(target=run, name="sampler", daemon=True)
    _sampler.update(record=record, stop=stop, thread=thread)
    thread.start()
    return True


def watch_stop(state: Path) -> dict[str, Any]:
    """Stop the sampler; every CPU each container was seen on, by `namespace/pod/container`
    (its cgroup named by its id: crictl, every state), the number of samples, and what was
    seen in cgroups that are no container (sandboxes, pod cgroups), by name."""
    if not _watch:
        return {"containers": {}, "samples": 0, "others": {}}
    _watch["stop"].set()
    _watch["thread"].join(timeout=60)
    union: dict[str, CPUSet] = _watch["union"]
    samples = _watch["counts"]["samples"]
    _watch.clear()
    listed = json.loads(_crictl("ps", "-a", "-o", "json"))["containers"]
    keys = ("pod.namespace", "pod.name", "container.name")
    names = {c["id"]: "/".join(c["labels"][f"io.kubernetes.{k}"] for k in keys) for c in listed}
    containers: dict[str, str] = {}
    others: dict[str, str] = {}
    for cgroup_name, cpus in union.items():
        if cgroup_name in names:
            key = names[cgroup_name]
            containers[key] = (CPUSet.parse(containers.get(key, "")) | cpus).format()
        else:
            others[cgroup_name] = cpus.format()
    return {"containers": containers, "samples": samples, "others": others}


def sampler_stop(state: Path) -> dict[str, Any] | None:
    """Stop the sampler; what it recorded (None when none ran)."""
    if not _sampler:
        return None
    _sampler["stop"].set()
    _sampler["thread"].join(60)
    record: dict[str, Any] = _sampler["record"]
    _sampler.clear()
    return record


def read_files(state: Path, pattern: str) -> dict[str, str]:
    """The text of every file matching the glob `pattern` (an absolute path), by path; '' for
    what is not a regular file (a socket: there or not)."""
    found = sorted(Path("/").glob(pattern.lstrip("/")))
    return {str(path): path.read_text() if path.is_file() else "" for path in found}


SOAK_SERVICES = ("topology", "allocator", "dra-plugin", "nri-plugin", "api")
# The soak's kubelet restarts a killed container after at most this long (KubeletConfiguration
# crashLoopBackOff.maxContainerRestartPeriod, the KubeletCrashLoopBackOffMax gate, beta and on
# in 1.37): hundreds of kills would otherwise back off to the default 300 s each.
SOAK_BACKOFF_LINE = "crashLoopBackOff: {maxContainerRestartPeriod: %s}\n"


# The RestartSec of their packages' units, which start them again when a start fails: a
# kubelet started while containerd is not serving yet exits, and is started again.
UNIT_RESTART_SEC = {"kubelet": 10.0, "containerd": 5.0}

_soak_stopped: set[tuple[str, int]] = set()  # the (container, pid) cluster_fault killed


def _kubelet_healthy() -> bool:
    healthz = f"http://127.0.0.1:{KUBELET_PORT - 2}/healthz"
    with (
        contextlib.suppress(OSError, urllib.error.URLError),
        urllib.request.urlopen(healthz, timeout=5),
    ):
        return True
    return False


def cluster_fault(state: Path, kind: str) -> dict[str, Any]:
    """One fault to the node of the guest's cluster: a driver container (`kind` a service)
    killed, as a crash (SIGKILL to its first process; the kubelet restarts it), or
    the kubelet or containerd restarted as their service manager would (SIGTERM, then the
    same command again: tools/cluster.sh records them). Answers whether it happened (a
    container in its back-off is not running to be stopped) and what was hit."""
    from harness.recorded_process import restart

    if kind in SOAK_SERVICES:
        # A container killed already whose exit the runtime has not processed yet can still
        # look running: a second kill of it would be no second fault.
        found = sorted(
            (cid, pid)
            for cid, (key, pid) in running_tasks(CLUSTER_TASKS).items()
            if key.startswith("kube-system/") and key.endswith(f"/{kind}")
            and (cid, pid) not in _soak_stopped
        )  # fmt: skip
        if not found:
            return {"done": False, "what": f"{kind}: not running"}
        _soak_stopped.add(found[0])
        # What `crictl stop --timeout 0` has the runtime send, sent by the kernel directly: a
        # crash, with no wait for the runtime's answer (on a saturated guest it outlasts any
        # deadline).
        with contextlib.suppress(ProcessLookupError):
            os.kill(found[0][1], signal.SIGKILL)
        return {"done": True, "what": f"{kind} {found[0][0][:12]}"}
    if kind in UNIT_RESTART_SEC:
        pid = restart(
            CLUSTER_DIR / "run" / f"{kind}.pid",
            CLUSTER_DIR / "logs" / f"{kind}.log",
            restart_sec=UNIT_RESTART_SEC[kind],
        )
        return {"done": True, "what": f"{kind} pid {pid}"}
    raise ValueError(f"no fault {kind!r}: a service of {SOAK_SERVICES}, kubelet or containerd")


def cluster_backoff(state: Path, max_period: str = "") -> dict[str, Any]:
    """The kubelet's crash-loop back-off capped at `max_period` ('' restores the default),
    the kubelet restarted with it and healthy again."""
    from harness.recorded_process import restart

    config = CLUSTER_DIR / "kubelet.yaml"
    lines = [
        line for line in config.read_text().splitlines(keepends=True)
        if not line.startswith("crashLoopBackOff:")
    ]  # fmt: skip
    if max_period:
        lines.append(SOAK_BACKOFF_LINE % max_period)
    config.write_text("".join(lines))
    began = time.monotonic()
    restart(
        CLUSTER_DIR / "run" / "kubelet.pid",
        CLUSTER_DIR / "logs" / "kubelet.log",
        restart_sec=UNIT_RESTART_SEC["kubelet"],
    )
    wait_for(_kubelet_healthy, "the kubelet healthy", timeout=READY_TIMEOUT, interval=0.5)
    return {"seconds": round(time.monotonic() - began, 1)}


# -- the upgrade walk-through --------------------------------------------------------------------


def walkthrough(
    state: Path, claims: int = 3, hold: dict[str, float] | None = None
) -> dict[str, Any]:
    """tests/skew's upgrade walk-through on this bed: `claims` one-CPU claims, each with its
    container running, and a shared container; then each of the five services is replaced in
    turn (stopped, started again from this checkout's build; `hold` keeps a service stopped
    that many seconds first) while a sampler reads every container's cgroup v2
    cpuset.cpus.effective and Cpus_allowed_list, and a prepare and a pin issued at once are
    timed. Answers the table rows and the kernel views before and after."""
    from test_skew_upgrade_realnode import probe, upgrade

    stack: Stack = _bed["stack"]
    node: ContainerdNode = _bed["node"]
    head = _head()
    walk_pod = pod(state, "walk")
    made = [claim(state, f"walk{n}", 1, walk_pod["uid"]) for n in range(claims)]
    expected: dict[int, CPUSet] = {}
    containers = [
        container(state, walk_pod["id"], f"claimed{n}", m["cdi"]) for n, m in enumerate(made)
    ]
    for made_claim, seen in zip(made, containers, strict=True):
        expected[seen["pid"]] = CPUSet.parse(made_claim["cpuset"])
    pool = CPUSet.parse(shared_pool(state))
    shared = container(state, walk_pod["id"], "shared")
    expected[shared["pid"]] = pool
    before = {str(pid): kernel_view(pid) for pid in expected}
    held = workloads.Workload(
        namespace=NAMESPACE,
        name=made[0]["name"],
        uid=made[0]["uid"],
        devices=made[0]["devices"],
        cpuset=made[0]["cpuset"],
        container=None,
        container_cpus="",
    )
    began = time.monotonic()
    base = probe(stack, node, walk_pod["id"], held, pool, "baseline", began)
    rows = [f"| none (baseline) | - | {base.prepare_cell()} | {base.pinned:.1f} s | |"]
    for service in skew_stack.DRIVER_SERVICES:
        with contextlib.redirect_stdout(io.StringIO()):
            away = (hold or {}).get(service, 0.0)
            rows.append(
                upgrade(stack, node, walk_pod["id"], service, head, expected, pool, held, away)
            )
    after = {str(pid): kernel_view(pid) for pid in expected}
    return {
        "rows": rows,
        "expected": {str(pid): cpus.format() for pid, cpus in expected.items()},
        "before": before,
        "after": after,
        "exited": stack.exited(),
    }


# -- chaos -----------------------------------------------------------------------------------------


def chaos(state: Path, faults: int, seed: int) -> dict[str, Any]:
    """The chaos tier's run (tests/chaos: workload, fault loop, settle and check) on a bed of
    its own, `dracpu dev up` restarting what the faults kill; then every container still
    running checked once more from the kernel's cgroup v2 view (its process's masks equal its
    cgroup's effective cpuset and memory nodes). Answers the tally."""
    from chaos import chaos_run
    from harness.realnode_stack import Stack as DevStack

    chaos_run.SETTLE_TIMEOUT = READY_TIMEOUT  # a killed service restarts in 10-40 s here
    stop(state)
    base = Path("/tmp/dracpu-soak")
    shutil.rmtree(base, ignore_errors=True)
    node = ContainerdNode(
        base / "node",
        base / "rd",
        plugin_request_timeout=NRI_TIMEOUT,
        plugin_registration_timeout=NRI_TIMEOUT,
    )
    dev = DevUp(
        base / "rd", free_port(), verbosity=1, extra=("--ready-timeout", str(READY_TIMEOUT))
    )
    lines: list[str] = []
    log = (state / "chaos.log").open("a")

    def report(line: str) -> None:
        lines.append(line)
        log.write(line + "\n")
        log.flush()

    began = time.monotonic()
    node.start(timeout=120)
    dev.start(timeout=READY_TIMEOUT * 2)
    dev.wait_ready(READY_TIMEOUT)
    ready = time.monotonic() - began
    try:
        tally = chaos_run.Chaos(DevStack(node, dev, base), seed, report=report).run(faults=faults)
        mismatches = []
        for container_id in node.containers():
            with contextlib.suppress(Exception):
                seen = kernel_view(node.container_pid(container_id))
                if (seen["cpus_allowed"], seen["mems_allowed"]) != (
                    seen["cpus_effective"],
                    seen["mems_effective"],
                ):
                    mismatches.append(f"{container_id[:12]}: {seen}")
    finally:
        try:
            node.teardown()
        finally:
            dev.stop()
            log.close()
    return {
        "seed": seed,
        "ready_s": round(ready, 1),
        "minutes": round((time.monotonic() - began) / 60, 1),
        "faults": tally.faults,
        "by_target": tally.by_target,
        "settles": tally.settles,
        "violations": tally.violations + mismatches,
        "operations": tally.operations,
        "failed_operations": tally.failed_operations,
        "settle_seconds": tally.settle_seconds,
        "lines": lines[-5:],
    }
