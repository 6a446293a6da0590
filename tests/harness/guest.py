"""The big-node guest from the host: boot it with qemu (TCG), talk to its agent, power it off.

The guest is 8 vCPUs as 2 sockets x 2 cores x 2 threads (`-cpu max,vendor=GenuineIntel`: with
an AMD-like CPU model TCG offers no SMT), 2 NUMA nodes of 1.5 GiB with distance 20, and
Debian's own kernel (tools/tier-bignode.sh bootstrap). Its root is the host's / over virtio-9p,
read-only, under a tmpfs overlay; `state/guest` is shared read-write (the agent's log, the
services' logs). The only network is qemu's user-mode one with restrict=on and three forwards,
all ending on the host's loopback: 127.0.0.1:<port> on the host to the agent in the guest,
127.0.0.1:<kubelet_port> to the guest cluster's kubelet on 10.96.0.15:17250 (the API server
reaches it there through its egress proxy: tests/bignode/cluster.py), and the guest's
10.96.0.1:443 (the `kubernetes` Service address; the user-mode network is 10.96.0.0/24, the
guest 10.96.0.15) to the API server of the guest's cluster on 127.0.0.1:<apiserver_port>
(tools/tcp-forward.py relaying each connection); 10.96.0.4:443 is a second address of that
forward, for a node whose pods need the Service address itself: it puts 10.96.0.1 on its own
relay, which dials the API server there (`tools/cluster.sh node` with
DRACPU_CLUSTER_SERVICE_UPSTREAM, the fleet's node). With `disk`, an image disk
(tools/tier-bignode.sh disk) is the guest's /dev/vda, its writes kept in qemu (snapshot).

qemu's PID is recorded in `state/qemu.pid`; `Guest.stop()` asks the agent to power off and
kills that PID when it does not. A guest booted for a test (`bound=True`) dies with the process
that booted it (PR_SET_PDEATHSIG), so a killed pytest leaves no qemu behind; a later boot on
the same state folder also kills a recorded qemu that is still alive.

Run as a script: `guest.py up|down|shell|status` (what tools/tier-bignode.sh calls).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from dracpu.core import children
from harness.crio_node import missing_crio_tools
from harness.paths import CACHE
from harness.realnode_stack import runtime
from harness.speed import budget
from harness.waits import WaitTimeout, wait_for

REPO = Path(__file__).resolve().parents[2]
RECIPE = "r5"  # tools/tier-bignode.sh RECIPE
MARKER = "mount_tag=dracpu-host"
GUEST_PORT = 7390
BOOT_TIMEOUT = float(os.environ.get("DRACPU_BIGNODE_BOOT_TIMEOUT", "180"))
APISERVER_PORT = int(os.environ.get("DRACPU_BIGNODE_APISERVER_PORT", "36443"))
SERVICE_ADDRESS = "10.96.0.1:443"  # in the guest: the `kubernetes` Service, forwarded
APISERVER_ALIAS = "10.96.0.4:443"  # in the guest: the same forward, for a relay of the Service
# The guest's cluster node (tests/bignode/inguest.py cluster_node): its address on qemu's
# user-mode network, its kubelet's port there, and the range of its pod network's bridge.
NODE_IP = "10.96.0.15"
KUBELET_PORT = 17250
KUBELET_ADDRESS = f"{NODE_IP}:{KUBELET_PORT}"
POD_CIDR = "10.244.0.0/24"
# What the guest's kernel prints when the guest is stuck rather than slow (loglevel=4: errors
# and worse reach the console), and the heartbeat tools/bignode/stage2.sh writes there.
STUCK = (
    "soft lockup",
    "blocked for more than",
    "self-detected stall",
    "detected stalls",
    "Out of memory",
    "Kernel panic",
)
HEARTBEAT = "bignode-heartbeat:"
# The agent answers a ping in its event loop; a minute without one is no longer slowness.
PING_TIMEOUT = 60.0


class GuestError(RuntimeError):
    """The guest or its agent failed; the message says which step and why."""


def kernel_dir() -> Path | None:
    """The newest complete kernel + initramfs entry of the cache, if any."""
    entries = sorted(CACHE.glob(f"bignode-*-{RECIPE}"), reverse=True)
    return next((e for e in entries if (e / ".complete").exists()), None)


def missing() -> str:
    """'' when the guest can boot here, else one line saying what is missing."""
    if os.geteuid() != 0:
        return "bignode tier needs root (9p root share, cgroups, runc in the guest)"
    needs = {
        "qemu-system-x86_64": shutil.which("qemu-system-x86_64"),
        "the guest kernel and initramfs": kernel_dir(),
        "containerd v2.4.2": (CACHE / "containerd-v2.4.2" / ".complete").exists() or None,
        "runc": Path("/usr/sbin/runc").exists() or None,
        "crictl": (CACHE / "crictl-v1.37.0" / ".complete").exists() or None,
        "the real-node test image": (CACHE / "realnode-image-1" / ".complete").exists() or None,
    }
    absent = [name for name, found in needs.items() if not found]
    if absent:
        return f"bignode tier: {', '.join(absent)} missing (run tools/tier-bignode.sh bootstrap)"
    if runtime() == "crio":
        # The guest runs the host's userland: the bed's CRI-O is the host's.
        reason = missing_crio_tools()
        return f"bignode tier on CRI-O: {reason}" if reason else ""
    return ""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _recorded_qemu(pidfile: Path) -> int | None:
    with contextlib.suppress(OSError, ValueError):
        pid = int(pidfile.read_text())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        if MARKER.encode() in cmdline and str(pidfile.parent).encode() in cmdline:
            return pid
    return None


class Guest:
    """One guest on a state folder; see the module docstring."""

    def __init__(
        self,
        state: Path,
        port: int = 0,
        *,
        bound: bool = True,
        apiserver_port: int = APISERVER_PORT,
        kubelet_port: int = 0,
        disk: Path | None = None,
    ) -> None:
        self.state = Path(state).absolute()
        self.port = port or free_port()
        self.bound = bound
        self.apiserver_port = apiserver_port
        # On the host's loopback: the forward to the guest cluster's kubelet (0: a free port).
        self.kubelet_port = kubelet_port or free_port()
        self.disk = disk
        self.images = ""  # the driver images' archive on `disk`
        self.hung = ""  # why the guest is known to be hung, once it is
        self.ping_timeout = budget(PING_TIMEOUT)
        self.pinged: Any = None  # the agent's last answer to a ping
        self.not_cluster = ""  # why the guest cannot be a cluster's node, if it cannot
        self.shared = self.state / "guest"
        self.pidfile = self.state / "qemu.pid"
        self.console = self.state / "console.log"
        self.shell_socket = self.state / "shell.sock"
        self.booted_in = 0.0
        self.process: subprocess.Popen[bytes] | None = None

    def qemu_argv(self) -> list[str]:
        kernel = kernel_dir()
        if kernel is None:
            raise GuestError("no guest kernel in the cache (run tools/tier-bignode.sh bootstrap)")
        # mitigations=off: no page-table isolation, whose switch on every system call costs
        # the emulator its translation cache; about twice as quick (docs/dev/bignode.md).
        # DRACPU_BIGNODE_MITIGATIONS=on boots with the kernel's own default.
        stock = os.environ.get("DRACPU_BIGNODE_MITIGATIONS") == "on"
        quick_flag = "" if stock else "mitigations=off "
        append = (
            f"console=ttyS0 quiet loglevel=4 panic=0 {quick_flag}"
            f"dracpu.state={self.shared} dracpu.stage2={REPO}/tools/bignode/stage2.sh "
            f"dracpu.cache={CACHE}"
        )
        relay = f"python3 {REPO}/tools/tcp-forward.py - 127.0.0.1:{self.apiserver_port}"
        net = (
            "user,id=n0,restrict=on,net=10.96.0.0/24,host=10.96.0.2,dns=10.96.0.3,"
            f"hostfwd=tcp:127.0.0.1:{self.port}-:{GUEST_PORT},"
            f"hostfwd=tcp:127.0.0.1:{self.kubelet_port}-{KUBELET_ADDRESS},"
            f"guestfwd=tcp:{SERVICE_ADDRESS}-cmd:{relay},"
            f"guestfwd=tcp:{APISERVER_ALIAS}-cmd:{relay}"
        )
        disk = []
        if self.disk is not None:
            disk = [
                *("-drive", f"file={self.disk},if=none,id=d0,format=raw,snapshot=on"),
                *("-device", "virtio-blk-pci,drive=d0"),
            ]
        return [
            *("nice", "-n", "10", "qemu-system-x86_64", "-name", "dracpu-bignode"),
            *("-accel", "tcg,thread=multi,tb-size=512", "-cpu", "max,vendor=GenuineIntel"),
            *("-m", "3G", "-smp", "8,sockets=2,cores=2,threads=2"),
            *("-object", "memory-backend-ram,id=m0,size=1536M"),
            *("-object", "memory-backend-ram,id=m1,size=1536M"),
            *("-numa", "node,nodeid=0,cpus=0-3,memdev=m0"),
            *("-numa", "node,nodeid=1,cpus=4-7,memdev=m1"),
            *("-numa", "dist,src=0,dst=1,val=20"),
            *("-kernel", str(kernel / "vmlinux"), "-initrd", str(kernel / "initrd.gz")),
            *("-append", append, "-display", "none", "-monitor", "none"),
            # No -no-reboot: a reboot in the guest resets the machine and boots the kernel
            # again, the disk's writes kept (`reboot`); a panic halts it (panic=0), and the
            # console's report makes it a hung guest (`diagnose`).
            "-nodefaults",
            *("-serial", f"file:{self.console}"),
            *("-serial", f"unix:{self.shell_socket},server=on,wait=off"),
            "-virtfs",
            f"local,path=/,{MARKER},security_model=none,readonly=on,multidevs=remap",
            "-virtfs",
            f"local,path={self.shared},mount_tag=dracpu-state,security_model=none,multidevs=remap",
            *("-netdev", net, "-device", "virtio-net-pci,netdev=n0,romfile="),
            *disk,
        ]

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> float:
        """Boot the guest and wait for its agent; the seconds that took."""
        self.kill_recorded()
        self.shared.mkdir(parents=True, exist_ok=True)
        for stale in (self.console, self.shell_socket, self.shared / "agent.log"):
            stale.unlink(missing_ok=True)
        (self.state / "port").write_text(f"{self.port}\n")
        began = time.monotonic()
        with (self.state / "qemu.log").open("ab") as log:
            argv = self.qemu_argv()
            self.process = subprocess.Popen(
                children.tied_to_parent(argv, signal.SIGKILL) if self.bound else argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.pidfile.write_text(f"{self.process.pid}\n")
        try:
            self._wait_agent(BOOT_TIMEOUT)
        except BaseException:
            self.kill_recorded()
            raise
        self.booted_in = time.monotonic() - began
        return self.booted_in

    def _wait_agent(
        self,
        timeout: float,
        booted_before: float | None = None,
        failure: str = "the guest's agent did not answer in time",
    ) -> None:
        """Until the agent answers a ping (with `booted_before`, only an agent whose uptime is
        lower: the next boot's); GuestError with `failure` and the console's tail otherwise."""

        def answers() -> bool:
            if self.process is not None and self.process.poll() is not None:
                raise GuestError(f"qemu exited with {self.process.returncode}: {self.tail()}")
            try:
                self.pinged = self._exchange({"op": "ping"}, timeout=5)
            except (OSError, GuestError, ValueError):
                return False
            return booted_before is None or float(self.pinged["uptime"]) < booted_before

        try:
            wait_for(answers, "the guest's agent", timeout=timeout, interval=0.5)
        except WaitTimeout:
            raise GuestError(f"{failure}: {self.tail()}") from None

    def stop(self, timeout: float = 30.0) -> None:
        """Ask the agent to power the guest off; kill qemu by its recorded PID after `timeout`."""
        if not self.hung:  # no diagnosis here: it is killed when it does not answer
            with contextlib.suppress(OSError, GuestError, ValueError):
                self._exchange({"op": "poweroff"}, timeout)
        if not self.hung:
            with contextlib.suppress(WaitTimeout):  # killed below
                wait_for(self._powered_off, "the guest to power off", timeout=timeout, interval=0.2)
        self.kill_recorded()
        if self.process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(5)  # reaped: no zombie left either

    def reboot(self, timeout: float = BOOT_TIMEOUT) -> float:
        """Reboot the guest from inside (the agent's `reboot`: sync, then `reboot -f`) and wait
        for the agent of the next boot; the guest's uptime when it first answers (seconds since
        that boot's kernel started)."""
        before = float(self._exchange({"op": "ping"}, self.ping_timeout)["uptime"])
        with contextlib.suppress(OSError, GuestError, ValueError):
            self._exchange({"op": "reboot"}, 30)
        self._wait_agent(timeout, before, "the guest did not come back from a reboot")
        return float(self.pinged["uptime"])

    def _powered_off(self) -> bool:
        if self.process is not None:
            self.process.poll()  # reaped when it is ours, so its PID no longer counts
        return _recorded_qemu(self.pidfile) is None

    def kill_recorded(self) -> None:
        """SIGKILL the qemu recorded in this state folder (only if it is that qemu)."""
        pid = _recorded_qemu(self.pidfile)
        if pid is not None:
            os.kill(pid, signal.SIGKILL)

            def gone() -> bool:
                if self.process is not None and self.process.pid == pid:
                    self.process.poll()
                return not Path(f"/proc/{pid}").exists() or _recorded_qemu(self.pidfile) is None

            with contextlib.suppress(WaitTimeout):
                wait_for(gone, f"qemu {pid} to go", timeout=5, interval=0.05)
        self.pidfile.unlink(missing_ok=True)

    def tail(self, lines: int = 12) -> str:
        texts = []
        for path in (self.console, self.state / "qemu.log", self.shared / "agent.log"):
            with contextlib.suppress(OSError):
                texts.append("\n".join(path.read_text(errors="replace").splitlines()[-lines:]))
        return "\n".join(t for t in texts if t)

    # -- the agent --------------------------------------------------------------------------

    def _console(self) -> list[str]:
        with contextlib.suppress(OSError):
            return self.console.read_text(errors="replace").splitlines()
        return []

    def diagnose(self) -> str:
        """'' when the agent answers a ping within `ping_timeout` (its event loop answers it,
        however busy its workers are); else why the guest is taken for hung, from what the host
        still sees: qemu, the kernel's reports and the last heartbeat on the console."""
        try:
            self.pinged = self._exchange({"op": "ping"}, self.ping_timeout)
            return ""
        except (OSError, GuestError, ValueError):
            pass
        parts = [f"its agent does not answer a ping in {self.ping_timeout:g} s"]
        if self.process is not None and self.process.poll() is not None:
            parts.insert(0, f"qemu exited with {self.process.returncode}")
        console = [line.strip() for line in self._console()]
        # The kernel's reports of being stuck: soft lockups, tasks blocked for minutes, RCU
        # stalls, the OOM killer, a panic.
        reports = [line for line in console if any(r in line for r in STUCK)]
        if reports:
            parts.append(f"{len(reports)} kernel reports on its console, the last: {reports[-1]}")
        beats = [line for line in console if HEARTBEAT in line]
        parts.append(f"its last heartbeat: {beats[-1]}" if beats else "no heartbeat on its console")
        return "; ".join(parts)

    def check(self) -> None:
        """GuestError at once when the guest is hung (known, or found now by `diagnose`)."""
        if not self.hung:
            self.hung = self.diagnose()
        if self.hung:
            raise GuestError(f"the guest is hung: {self.hung}")

    def call_op(self, request: dict[str, Any], timeout: float = 600.0) -> Any:
        """One request to the agent, its answer. A request not answered in `timeout` is told
        apart: a guest that still answers a ping is slow, one that does not is hung, and every
        later call then fails at once with the reason."""
        if self.hung:
            raise GuestError(f"the guest is hung: {self.hung}")
        try:
            return self._exchange(request, timeout)
        except TimeoutError:
            pass
        unanswered = f"no answer to {request.get('fn', request['op'])} in {timeout:g} s"
        self.hung = self.diagnose()
        if self.hung:
            raise GuestError(f"{unanswered}; the guest is hung: {self.hung}")
        raise GuestError(f"{unanswered}; the guest itself answers ({self.pinged})")

    def _exchange(self, request: dict[str, Any], timeout: float) -> Any:
        with socket.create_connection(("127.0.0.1", self.port), timeout=timeout) as conn:
            conn.sendall(json.dumps(request).encode() + b"\n")
            reply = b""
            while not reply.endswith(b"\n"):
                chunk = conn.recv(1 << 20)
                if not chunk:
                    raise GuestError(f"the agent closed the connection during {request['op']}")
                reply += chunk
        answer = json.loads(reply)
        if "error" in answer:
            raise GuestError(f"in the guest, {request.get('fn', request['op'])}: {answer['error']}")
        return answer["ok"]

    def call(self, fn: str, timeout: float = 600.0, **kwargs: Any) -> Any:
        """inguest.<fn>(**kwargs) in the guest; its JSON result."""
        return self.call_op({"op": "call", "fn": fn, "kwargs": kwargs}, timeout)

    def sh(self, *argv: str, timeout: float = 120.0) -> str:
        """A command in the guest; its stdout (GuestError with its stderr when it fails)."""
        done = self.call_op({"op": "sh", "argv": list(argv), "timeout": timeout}, timeout + 10)
        if done["rc"] != 0:
            raise GuestError(f"in the guest, {argv[0]} exited {done['rc']}: {done['stderr']}")
        return str(done["stdout"])


# -- by hand ---------------------------------------------------------------------------------


def _hand_guest() -> Guest:
    state = Path(os.environ.get("DRACPU_BIGNODE_STATE", "/tmp/dracpu-bignode"))
    port = int(os.environ.get("DRACPU_BIGNODE_PORT", "36190"))
    return Guest(state, port, bound=False)


def _shell(guest: Guest) -> int:
    """Attach the terminal to the guest's shell (its second serial port); Ctrl-] detaches."""
    import select
    import termios
    import tty

    if not guest.shell_socket.exists():
        print(f"bignode: no guest shell at {guest.shell_socket} (make bignode-up)", file=sys.stderr)
        return 1
    conn = socket.socket(socket.AF_UNIX)
    conn.connect(str(guest.shell_socket))
    conn.sendall(b"\n")
    print("bignode: attached to the guest's shell; Ctrl-] detaches", flush=True)
    stdin = sys.stdin.fileno()
    saved = termios.tcgetattr(stdin) if os.isatty(stdin) else None
    try:
        if saved is not None:
            tty.setraw(stdin)
        while True:
            ready, _, _ = select.select([stdin, conn], [], [])
            if conn in ready:
                data = conn.recv(4096)
                if not data:
                    return 0
                os.write(sys.stdout.fileno(), data)
            if stdin in ready:
                data = os.read(stdin, 1024)
                if not data or b"\x1d" in data:
                    return 0
                conn.sendall(data)
    finally:
        if saved is not None:
            termios.tcsetattr(stdin, termios.TCSADRAIN, saved)
        conn.close()
        print()


def main(argv: list[str]) -> int:
    command = argv[0] if argv else ""
    guest = _hand_guest()
    if command == "up":
        reason = missing()
        if reason:
            print(reason, file=sys.stderr)
            return 1
        if _recorded_qemu(guest.pidfile):
            print(f"bignode: already up (qemu pid {guest.pidfile.read_text().strip()})")
            return 0
        print("bignode: booting the guest (8 vCPUs, 2 sockets x 2 cores x 2 threads, 2 NUMA nodes)")
        seconds = guest.start()
        print(f"bignode: agent answering after {seconds:.1f} s; qemu pid {guest.process.pid}")
        print("bignode: shell: tools/tier-bignode.sh shell (Ctrl-] detaches)")
        print(f"bignode: logs: {guest.console}, {guest.shared}/agent.log; stop: make bignode-down")
        return 0
    if command == "down":
        guest.stop()
        print("bignode: guest stopped")
        return 0
    if command == "shell":
        return _shell(guest)
    if command == "status":
        pid = _recorded_qemu(guest.pidfile)
        print(f"state {guest.state}  port {guest.port}  qemu {pid or 'not running'}")
        return 0 if pid else 1
    print("usage: guest.py up|down|shell|status", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
