"""A real containerd 2.x + runc node on private directories, driven with crictl.

`ContainerdNode` starts a containerd built into the cache by tools/build-containerd.sh (version
selectable) with its own root, state, sockets and runc root under one base directory, its NRI
socket and CDI spec directory pointed at a given run folder (where `dracpu dev up` puts them),
cgroupfs and `restrict_oom_score_adj = true` (root without CAP_SYS_RESOURCE cannot lower a
sandbox's oom_score_adj). It imports the test image (busybox + a static pause, made by
`tools/tier-realnode.sh bootstrap`), runs host-network pods and containers through crictl, reads
the kernel's truth for a container (cgroup `cpuset.cpus`, `/proc/<pid>/status`
Cpus_allowed_list), restarts or stops containerd by its PID, and tears everything down.

Teardown is idempotent and also cleans what a killed run left: the base directory holds a
record (`node.json`) of the containerd PID and the cgroup parent; `cleanup_leftovers(base)`
kills the processes in that cgroup parent and the shims serving this node's socket, unmounts
everything mounted under the base directory and removes the cgroups. A node holds an exclusive
lock on `node.lock` in its base for as long as its test process lives, so a later start can
tell a killed run's node (lock free) from a live one and sweep it (`sweep_abandoned`).

Every path is derived from `base`; keep it short (unix socket paths must fit 108 bytes).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import uuid
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from dracpu.core.errors import NotFoundError
from harness.cgroups import CGROUP_ROOT, Cgroups
from harness.paths import CACHE
from harness.waits import WaitTimeout, wait_for

CONTAINERD_VERSIONS = ("v2.4.2", "v2.3.7")
CRICTL_VERSION = "v1.37.0"
IMAGE_VERSION = "1"
IMAGE_NAME = "localhost/dracpu-realnode:1"
RUNC = Path("/usr/sbin/runc")
CGROUPS = Cgroups(CGROUP_ROOT)
RECORD = "node.json"
LOCK = "node.lock"


class NodeError(RuntimeError):
    """A step of the node failed; the message carries the tool's own words."""


def containerd_dir(version: str) -> Path:
    return CACHE / f"containerd-{version}" / "bin"


def crictl_path() -> Path:
    return CACHE / f"crictl-{CRICTL_VERSION}" / "bin" / "crictl"


def image_archive() -> Path:
    return CACHE / f"realnode-image-{IMAGE_VERSION}" / "busybox-pause.tar"


def missing_tools(version: str = CONTAINERD_VERSIONS[0]) -> str:
    """'' when everything the node needs is present, else one line saying what is missing."""
    needs = {
        f"containerd {version}": CACHE / f"containerd-{version}" / ".complete",
        f"crictl {CRICTL_VERSION}": CACHE / f"crictl-{CRICTL_VERSION}" / ".complete",
        "the test image": CACHE / f"realnode-image-{IMAGE_VERSION}" / ".complete",
        "runc": RUNC,
    }
    absent = [name for name, path in needs.items() if not path.exists()]
    if absent:
        return f"{', '.join(absent)} missing (run tools/tier-realnode.sh bootstrap as root)"
    return ""


# -- kernel truth ----------------------------------------------------------------------------


def _status(pid: int, key: str) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return line.split(":", 1)[1].strip()
    raise NodeError(f"/proc/{pid}/status has no {key}")


def cpus_allowed(pid: int) -> str:
    """Cpus_allowed_list of a process, as the kernel reports it."""
    return _status(pid, "Cpus_allowed_list")


def mems_allowed(pid: int) -> str:
    """Mems_allowed_list of a process, as the kernel reports it."""
    return _status(pid, "Mems_allowed_list")


def cgroup_cpuset(pid: int) -> str:
    """The CPUs of the cgroup the process is in: cpuset.cpus on cgroup v1 (the cpuset
    hierarchy), cpuset.cpus.effective on v2."""
    try:
        return CGROUPS.cpus(pid)
    except NotFoundError as exc:
        raise NodeError(str(exc)) from None


def cgroup_cpuset_mems(pid: int) -> str:
    """The memory nodes of the cgroup the process is in (cpuset.mems / cpuset.mems.effective)."""
    try:
        return CGROUPS.mems(pid)
    except NotFoundError as exc:
        raise NodeError(str(exc)) from None


# -- the node --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Container:
    id: str
    name: str
    pod_id: str

    def pid(self, node: ContainerdNode) -> int:
        return node.container_pid(self.id)


class ContainerdNode:
    """One containerd on private directories; see the module docstring."""

    def __init__(
        self,
        base: Path,
        run_dir: Path,
        *,
        version: str = CONTAINERD_VERSIONS[0],
        plugin_request_timeout: str = "2s",
        plugin_registration_timeout: str = "5s",
        cgroup_parent: str = "",
    ) -> None:
        self.base = Path(base).absolute()
        self.run_dir = Path(run_dir).absolute()
        self.version = version
        self.bin = containerd_dir(version)
        self.crictl_bin = crictl_path()
        self.plugin_request_timeout = plugin_request_timeout
        self.plugin_registration_timeout = plugin_registration_timeout
        # One cgroup parent per node: everything its pods run is below it, so a teardown can
        # find and kill it by path, never by name.
        self.cgroup_parent = cgroup_parent or f"/dracpu-rn-{uuid.uuid4().hex[:8]}"
        self.socket = self.base / "run" / "containerd.sock"
        self.config_file = self.base / "config.toml"
        self.log_file = self.base / "containerd.log"
        self.nri_socket = self.run_dir / "nri" / "nri.sock"
        self.cdi_dir = self.run_dir / "cdi"
        self.process: subprocess.Popen[bytes] | None = None
        self._log: Any = None
        self._pods: dict[str, Path] = {}  # pod id -> its sandbox config file
        self._pod_uids: dict[str, str] = {}  # pod id -> the UID it was started with
        self._started = False
        self._lock: TextIO | None = None

    # -- configuration ----------------------------------------------------------------------

    def config_text(self) -> str:
        b = self.base
        return f"""# containerd {self.version} for the real-node tests (config version 3)
version = 3
root = "{b}/root"
state = "{b}/state"

[grpc]
  address = "{self.socket}"

[ttrpc]
  address = "{self.socket}.ttrpc"

[debug]
  level = "info"

[plugins]
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = "overlayfs"
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = "{IMAGE_NAME}"

  [plugins.'io.containerd.cri.v1.runtime']
    cdi_spec_dirs = ["{self.cdi_dir}"]
    restrict_oom_score_adj = true
    # On by default: containerd then drops every hugepage limit, NRI's adjustments included.
    disable_hugetlb_controller = false
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = "runc"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = "{RUNC}"
          SystemdCgroup = false
          Root = "{b}/runc"
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ["{b}/cni/bin"]
      conf_dir = "{b}/cni/conf"

  [plugins.'io.containerd.grpc.v1.cri']
    disable_tcp_service = true
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"

  [plugins.'io.containerd.nri.v1.nri']
    disable = false
    socket_path = "{self.nri_socket}"
    plugin_path = "{b}/nri-plugins"
    plugin_config_path = "{b}/nri-conf.d"
    plugin_registration_timeout = "{self.plugin_registration_timeout}"
    plugin_request_timeout = "{self.plugin_request_timeout}"
    disable_connections = false
"""

    def _hold_lock(self) -> None:
        """Mark this base as in use until this process ends (the kernel drops the lock then)."""
        self.base.mkdir(parents=True, exist_ok=True)
        handle = (self.base / LOCK).open("a")
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        self._lock = handle

    def _record(self) -> None:
        (self.base / RECORD).write_text(
            json.dumps(
                {
                    "containerd_pid": self.process.pid if self.process else 0,
                    "socket": str(self.socket),
                    "cgroup_parent": self.cgroup_parent,
                    "version": self.version,
                }
            )
        )

    # -- lifecycle --------------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> None:
        """Start the runtime, wait for its CRI socket, import the test image (first start)."""
        if self.running:
            return
        if not self._started:
            sweep_abandoned()  # nodes of killed runs elsewhere under /tmp
            cleanup_leftovers(self.base)  # of an earlier, killed run on this base only
            self._hold_lock()
        self._started = True
        for sub in self.subdirectories:
            (self.base / sub).mkdir(parents=True, exist_ok=True)
        self.nri_socket.parent.mkdir(parents=True, exist_ok=True)
        self.cdi_dir.mkdir(parents=True, exist_ok=True)
        self.write_config()
        self._log = self.log_file.open("ab")
        self.process = subprocess.Popen(
            self.daemon_argv(),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=self.daemon_env(),
            start_new_session=True,
        )
        self._record()
        try:
            wait_for(
                self._cri_ready,
                f"{self.runtime_name} {self.version} CRI at {self.socket}",
                timeout=timeout,
            )
        except WaitTimeout as exc:
            raise NodeError(str(exc)) from None  # a step of the node, as its callers expect
        if not self.image_present():
            self.import_image()

    # What a runtime of this kind needs: its directories, configuration and command line.
    runtime_name = "containerd"
    subdirectories: tuple[str, ...] = (
        "run",
        "root",
        "state",
        "runc",
        "cni/bin",
        "cni/conf",
        "nri-plugins",
        "nri-conf.d",
        "podlogs",
    )

    def write_config(self) -> None:
        self.config_file.write_text(self.config_text())

    def daemon_argv(self) -> list[str]:
        return [str(self.bin / "containerd"), "--config", str(self.config_file)]

    def daemon_env(self) -> dict[str, str]:
        return dict(os.environ, PATH=f"{self.bin}:/usr/sbin:/usr/bin:/sbin:/bin")

    def _cri_ready(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            raise NodeError(
                f"{self.runtime_name} exited with {self.process.returncode}: {self.log_tail()}"
            )
        if not self.socket.is_socket():
            return False
        probe = self._run([str(self.crictl_bin), *self._endpoints(), "version"], check=False)
        return probe.returncode == 0

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def pid(self) -> int:
        if self.process is None:
            raise NodeError(f"{self.runtime_name} is not running")
        return self.process.pid

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM containerd (by its PID) and wait; containers and shims keep running."""
        process = self.process
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.process = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def restart(self) -> None:
        """Stop and start containerd; pods, containers and shims keep running across it."""
        self.stop()
        self.start()

    def log_tail(self, lines: int = 15) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def log_text(self) -> str:
        with contextlib.suppress(OSError):
            return self.log_file.read_text(errors="replace")
        return ""

    # -- tools ------------------------------------------------------------------------------

    def _endpoints(self) -> list[str]:
        url = f"unix://{self.socket}"
        return ["--runtime-endpoint", url, "--image-endpoint", url, "--timeout", "60s"]

    @staticmethod
    def _run(
        argv: Sequence[str],
        *,
        check: bool = True,
        timeout: float = 120.0,
        input_text: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout, input=input_text
        )
        if check and done.returncode != 0:
            reason = done.stderr.strip().splitlines()[-1:] or [f"exit {done.returncode}"]
            raise NodeError(f"{Path(argv[0]).name} {' '.join(argv[1:3])}: {reason[0]}")
        return done

    def crictl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run crictl against this node; NodeError with crictl's last stderr line on failure."""
        done = self._run([str(self.crictl_bin), *self._endpoints(), *args], check=False)
        if check and done.returncode != 0:
            reason = done.stderr.strip().splitlines()[-1:] or [f"exit {done.returncode}"]
            raise NodeError(f"crictl {args[0] if args else ''}: {reason[0]}")
        return done

    def ctr(self, *args: str) -> str:
        argv = [str(self.bin / "ctr"), "--address", str(self.socket), "-n", "k8s.io", *args]
        return self._run(argv).stdout

    def image_present(self) -> bool:
        return IMAGE_NAME in self.ctr("images", "ls", "-q")

    def import_image(self) -> None:
        self.ctr("images", "import", "--platform", "linux/amd64", str(image_archive()))

    def runtime_version(self) -> str:
        """What containerd says it is (crictl version's RuntimeVersion)."""
        for line in self.crictl("version").stdout.splitlines():
            if line.startswith("RuntimeVersion:"):
                return line.split(":", 1)[1].strip()
        return ""

    # -- pods and containers ----------------------------------------------------------------

    def _write(self, name: str, document: Mapping[str, Any]) -> Path:
        path = self.base / "specs" / f"{name}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(document))
        return path

    def pod_config(self, name: str, uid: str = "", namespace: str = "default") -> dict[str, Any]:
        # Host network (no CNI needed); no hostname: runc cannot set one without a UTS namespace.
        return {
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": uid or str(uuid.uuid4()),
                "attempt": 0,
            },
            "log_directory": str(self.base / "podlogs" / name),
            "linux": {
                "cgroup_parent": self.cgroup_parent,
                "security_context": {"namespace_options": {"network": 2, "pid": 1, "ipc": 0}},
            },
        }

    def container_linux(self) -> dict[str, Any]:
        """The `linux` section of a container config (containerd takes the pod's namespaces)."""
        return {}

    def run_pod(self, name: str, uid: str = "", namespace: str = "default") -> str:
        """RunPodSandbox; returns the pod id (`pod_uid` gives the pod's UID)."""
        uid = uid or str(uuid.uuid4())
        path = self._write(f"pod-{name}", self.pod_config(name, uid, namespace))
        pod_id = self.crictl("runp", str(path)).stdout.strip()
        self._pods[pod_id] = path
        self._pod_uids[pod_id] = uid
        return pod_id

    def pod_uid(self, pod_id: str) -> str:
        """The UID of a pod this node object started: what a claim's reservedFor names."""
        try:
            return self._pod_uids[pod_id]
        except KeyError:
            raise NodeError(f"pod {pod_id} was not started by this node object") from None

    def create_container(
        self,
        pod_id: str,
        name: str,
        *,
        cdi_devices: Iterable[str] = (),
        env: Mapping[str, str] | None = None,
        command: Sequence[str] = ("/bin/sleep", "36000"),
        mounts: Mapping[str, str] | None = None,
    ) -> Container:
        """CreateContainer (not started); CDI device ids as the kubelet passes them; `mounts`
        binds node paths (values) read-only at container paths (keys)."""
        config = {
            "metadata": {"name": name},
            "image": {"image": IMAGE_NAME},
            "command": list(command),
            "log_path": f"{name}.log",
            "envs": [{"key": k, "value": v} for k, v in (env or {}).items()],
            "CDI_devices": [{"name": device} for device in cdi_devices],
            "mounts": [
                {"container_path": inside, "host_path": outside, "readonly": True}
                for inside, outside in (mounts or {}).items()
            ],
            "linux": self.container_linux(),
        }
        path = self._write(f"ctr-{pod_id[:12]}-{name}", config)
        pod_path = self._pods.get(pod_id)
        if pod_path is None:
            raise NodeError(f"pod {pod_id} was not started by this node object")
        container_id = self.crictl("create", pod_id, str(path), str(pod_path)).stdout.strip()
        return Container(container_id, name, pod_id)

    def start_container(self, container: Container) -> Container:
        self.crictl("start", container.id)
        return container

    def run_container(
        self,
        pod_id: str,
        name: str,
        *,
        cdi_devices: Iterable[str] = (),
        env: Mapping[str, str] | None = None,
        command: Sequence[str] = ("/bin/sleep", "36000"),
        mounts: Mapping[str, str] | None = None,
    ) -> Container:
        """Create and start a container."""
        container = self.create_container(
            pod_id, name, cdi_devices=cdi_devices, env=env, command=command, mounts=mounts
        )
        return self.start_container(container)

    def run_containers(
        self, pod_id: str, names: Sequence[str], *, workers: int = 4
    ) -> list[Container]:
        """Create and start many shared containers, a few crictl calls at a time."""
        with ThreadPoolExecutor(max_workers=workers) as pool:
            return list(pool.map(lambda name: self.run_container(pod_id, name), names))

    def pids(self, container_ids: Sequence[str], *, workers: int = 4) -> dict[str, int]:
        """Container id -> its process id, for many containers."""
        with ThreadPoolExecutor(max_workers=workers) as pool:
            return dict(
                zip(container_ids, pool.map(self.container_pid, container_ids), strict=True)
            )

    def inspect(self, container_id: str) -> dict[str, Any]:
        document: dict[str, Any] = json.loads(self.crictl("inspect", container_id).stdout)
        return document

    def container_pid(self, container_id: str) -> int:
        pid = int(self.inspect(container_id)["info"]["pid"])
        if pid <= 0:
            raise NodeError(f"container {container_id} has no process")
        return pid

    def container_state(self, container_id: str) -> str:
        return str(self.inspect(container_id)["status"]["state"])

    def exec(self, container_id: str, *argv: str) -> str:
        return self.crictl("exec", container_id, *argv).stdout

    def stop_container(self, container_id: str, timeout: int = 1) -> None:
        self.crictl("stop", "-t", str(timeout), container_id)

    def remove_container(self, container_id: str) -> None:
        self.crictl("rm", "-f", container_id)

    def remove_pod(self, pod_id: str) -> None:
        self.crictl("stopp", pod_id, check=False)
        self.crictl("rmp", "-f", pod_id, check=False)
        self._pods.pop(pod_id, None)

    def pods(self) -> list[str]:
        return self.crictl("pods", "-q").stdout.split()

    def containers(self) -> list[str]:
        return self.crictl("ps", "-q").stdout.split()

    # -- kernel truth for a container ------------------------------------------------------

    def allowed_cpus(self, container_id: str) -> str:
        return cpus_allowed(self.container_pid(container_id))

    def cgroup_cpus(self, container_id: str) -> str:
        return cgroup_cpuset(self.container_pid(container_id))

    def cpu_quota(self, container_id: str) -> int | None:
        """The container cgroup's CPU quota per period in microseconds (None: unlimited)."""
        return CGROUPS.cpu_quota(self.container_pid(container_id))

    # -- teardown ---------------------------------------------------------------------------

    def teardown(self) -> None:
        """Remove every pod, stop containerd, clean what is left. Safe to call twice."""
        if self.running:
            for pod_id in set(self.pods()) | set(self._pods):
                with contextlib.suppress(NodeError, subprocess.TimeoutExpired):
                    self.remove_pod(pod_id)
        self.stop()
        cleanup_leftovers(self.base)


def _pids_in_cgroup(parent: str) -> list[int]:
    return CGROUPS.procs(parent)


def _remove_cgroups(parent: str) -> None:
    for top in CGROUPS.tops(parent):
        # Deepest first: a cgroup directory can only be removed once it has no children.
        for directory in sorted(
            (p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)
        ):
            with contextlib.suppress(OSError):
                directory.rmdir()
        with contextlib.suppress(OSError):
            top.rmdir()


def _shim_pids(socket: str) -> list[int]:
    """Shims started by this node: their command line names this node's socket."""
    found = []
    needle = socket.encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            if argv and argv[0].endswith(b"containerd-shim-runc-v2") and needle in argv:
                found.append(int(entry.name))
    return found


def _monitor_pids(base: Path) -> list[int]:
    """CRI-O's container monitors (conmon) for containers under `base`: their command line
    names the base directory (bundle, exit and log paths)."""
    found = []
    needle = (str(base.absolute()) + "/").encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            if argv and argv[0].endswith(b"conmon") and any(needle in a for a in argv):
                found.append(int(entry.name))
    return found


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(OSError):
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    return False


def cleanup_leftovers(base: Path) -> None:
    """Undo what a node under `base` left running, mounted or created (by its record)."""
    record_file = Path(base) / RECORD
    try:
        record = json.loads(record_file.read_text())
    except (OSError, ValueError):
        return
    pid = int(record.get("containerd_pid") or 0)
    if pid and _alive(pid):
        with contextlib.suppress(OSError):
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            if str(Path(base).absolute()).encode() in cmdline:
                _kill(pid)
    victims = set(_shim_pids(record.get("socket", ""))) if record.get("socket") else set()
    victims.update(_monitor_pids(Path(base)))
    parent = record.get("cgroup_parent", "")
    if parent:
        victims.update(_pids_in_cgroup(parent))
    for victim in victims:
        _kill(victim)
    with contextlib.suppress(WaitTimeout):  # what still runs holds no mount we need gone
        wait_for(
            lambda: not any(_alive(v) for v in victims), "the node's processes to end",
            timeout=10, interval=0.05,
        )  # fmt: skip
    _unmount_under(Path(base).absolute())
    if parent:
        _remove_cgroups(parent)
    record_file.unlink(missing_ok=True)


def sweep_abandoned(root: Path = Path("/tmp"), pattern: str = "dracpu-*") -> list[Path]:
    """Clean the nodes that killed runs left under `root` (their lock is free): processes,
    mounts and cgroups go, the directories (logs) stay. Returns the bases cleaned."""
    cleaned = []
    for record in sorted(root.glob(f"{pattern}/{RECORD}")) + sorted(
        root.glob(f"{pattern}/*/{RECORD}")
    ):
        base = record.parent
        try:
            handle = (base / LOCK).open("a")
        except OSError:
            continue
        with handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # a live run holds it
            cleanup_leftovers(base)
            cleaned.append(base)
    return cleaned


def _unmount_under(base: Path) -> None:
    prefix = str(base) + "/"
    mounts = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point.startswith(prefix):
            mounts.append(point)
    for point in sorted(mounts, key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)
