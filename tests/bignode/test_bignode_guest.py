"""The guest's qemu command line and its PID record, checked without booting anything: the
machine is the one the scenarios assume, the network reaches nothing but forwards that end on
the host's loopback, and a recorded PID is killed only when it is that guest's qemu."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from bignode import cluster as cluster_module
from harness import guest as guest_module
from harness.guest import MARKER, Guest, GuestError, _recorded_qemu, free_port
from harness.waits import wait_for


@pytest.fixture
def argv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    kernel = tmp_path / f"bignode-6.1.0-99-amd64-{guest_module.RECIPE}"
    kernel.mkdir()
    monkeypatch.setattr(guest_module, "kernel_dir", lambda: kernel)
    return Guest(tmp_path / "state", 40123, apiserver_port=40443, kubelet_port=40250).qemu_argv()


def option(argv: list[str], name: str) -> list[str]:
    return [argv[i + 1] for i, word in enumerate(argv) if word == name]


def test_the_machine_is_two_sockets_of_two_smt_cores_on_two_numa_nodes(argv: list[str]) -> None:
    assert option(argv, "-smp") == ["8,sockets=2,cores=2,threads=2"]
    assert option(argv, "-cpu") == ["max,vendor=GenuineIntel"]  # SMT needs the Intel vendor
    assert option(argv, "-numa") == [
        "node,nodeid=0,cpus=0-3,memdev=m0",
        "node,nodeid=1,cpus=4-7,memdev=m1",
        "dist,src=0,dst=1,val=20",
    ]
    assert option(argv, "-accel")[0].startswith("tcg")


def test_the_only_network_is_user_mode_restricted_with_forwards_to_the_hosts_loopback(
    argv: list[str],
) -> None:
    (netdev,) = option(argv, "-netdev")
    pairs = [f.partition("=")[::2] for f in netdev.split(",")[1:]]
    fields = dict(pairs)
    assert netdev.startswith("user,") and fields["restrict"] == "on"
    assert (fields["net"], fields["host"]) == ("10.96.0.0/24", "10.96.0.2")
    # In: the host's 127.0.0.1:40123 to the agent, and 127.0.0.1:40250 to the cluster's
    # kubelet on the guest's address. Out: only the `kubernetes` Service address and a
    # second address of the same forward (for a node's relay of the Service to its pods),
    # each connection relayed by a process on the host to the API server on its loopback.
    assert [value for key, value in pairs if key == "hostfwd"] == [
        "tcp:127.0.0.1:40123-:7390",
        "tcp:127.0.0.1:40250-10.96.0.15:17250",
    ]
    forwards = [value.partition("-cmd:") for key, value in pairs if key == "guestfwd"]
    assert [target for target, _, _ in forwards] == ["tcp:10.96.0.1:443", "tcp:10.96.0.4:443"]
    for _, _, relay in forwards:
        assert relay.endswith("tools/tcp-forward.py - 127.0.0.1:40443")
    assert not any(word.startswith(("tap", "bridge")) for word in option(argv, "-netdev"))
    assert "-nic" not in argv and "-net" not in argv


def test_the_image_disk_is_attached_with_writes_kept_in_qemu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(guest_module, "kernel_dir", lambda: tmp_path)
    disk = tmp_path / "images.ext4"
    argv = Guest(tmp_path / "state", 40123, disk=disk).qemu_argv()
    assert option(argv, "-drive") == [f"file={disk},if=none,id=d0,format=raw,snapshot=on"]
    assert option(argv, "-device")[-1] == "virtio-blk-pci,drive=d0"


def test_the_host_root_is_shared_read_only_and_only_the_state_folder_writable(
    argv: list[str], tmp_path: Path
) -> None:
    shares = option(argv, "-virtfs")
    assert shares[0].startswith("local,path=/,") and "readonly=on" in shares[0]
    assert f"path={tmp_path / 'state' / 'guest'}," in shares[1]
    assert "readonly" not in shares[1]


def started(argv: list[str]) -> subprocess.Popen[bytes]:
    """A process, returned once its command line is readable (the exec has happened)."""
    process = subprocess.Popen(argv)
    wait_for(
        lambda: Path(f"/proc/{process.pid}/cmdline").read_bytes(),
        f"the command line of {argv[0]}",
        timeout=10,
        interval=0.01,
    )
    return process


def test_a_recorded_pid_counts_only_when_it_is_this_state_folders_qemu(tmp_path: Path) -> None:
    pidfile = tmp_path / "qemu.pid"
    stranger = started([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        pidfile.write_text(f"{stranger.pid}\n")
        assert _recorded_qemu(pidfile) is None  # alive, but not a guest of this folder
        Guest(tmp_path).kill_recorded()
        assert stranger.poll() is None
    finally:
        stranger.kill()
        stranger.wait()
    look_alike = started(
        [sys.executable, "-c", "import time; time.sleep(30)", MARKER, str(tmp_path)]
    )
    try:
        pidfile.write_text(f"{look_alike.pid}\n")
        assert _recorded_qemu(pidfile) == look_alike.pid
        Guest(tmp_path).kill_recorded()
        assert look_alike.wait(5) == -9
        assert not pidfile.exists()
    finally:
        look_alike.kill()


def test_without_root_the_tier_says_so_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(guest_module.os, "geteuid", lambda: 1000)
    reason = guest_module.missing()
    assert reason.startswith("bignode tier needs root") and "\n" not in reason


def test_a_missing_tool_is_named_with_the_command_that_gets_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(guest_module, "CACHE", tmp_path)
    monkeypatch.setattr(guest_module.os, "geteuid", lambda: 0)
    reason = guest_module.missing()
    assert "the guest kernel and initramfs" in reason and "containerd v2.4.2" in reason
    assert reason.endswith("(run tools/tier-bignode.sh bootstrap)") and "\n" not in reason


def pinged_only() -> socket.socket:
    """A listening agent that answers pings and nothing else (a guest busy with a long step)."""
    server = socket.create_server(("127.0.0.1", 0))

    def answer(conn: socket.socket) -> None:
        with conn, conn.makefile("rwb") as stream:
            for line in stream:
                if json.loads(line)["op"] == "ping":
                    stream.write(b'{"ok": {"uptime": 12.5, "cpus": 8}}\n')
                    stream.flush()

    def serve() -> None:
        with contextlib.suppress(OSError):
            while True:
                threading.Thread(target=answer, args=(server.accept()[0],), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return server


def test_a_hung_guest_is_told_apart_and_later_calls_fail_at_once(tmp_path: Path) -> None:
    silent = socket.create_server(("127.0.0.1", 0))  # accepts, never answers, not even a ping
    guest = Guest(tmp_path, silent.getsockname()[1])
    guest.ping_timeout = 0.2
    guest.console.write_text(
        "bignode-heartbeat: [361.20s] MemAvailable 1210 MiB, load 9.10 8.02 6.50, 0 tasks in D\n"
        "[  392.97] watchdog: BUG: soft lockup - CPU#6 stuck for 286s! [containerd:369]\n"
        "bignode-heartbeat: [391.70s] MemAvailable 1190 MiB, load 9.80 8.30 6.70, 2 tasks in D\n"
    )
    with silent, pytest.raises(GuestError) as failed:
        guest.call("kernel", timeout=0.2)
    assert str(failed.value) == (
        "no answer to kernel in 0.2 s; the guest is hung: its agent does not answer a ping in "
        "0.2 s; 1 kernel reports on its console, the last: [  392.97] watchdog: BUG: soft "
        "lockup - CPU#6 stuck for 286s! [containerd:369]; its last heartbeat: bignode-heartbeat:"
        " [391.70s] MemAvailable 1190 MiB, load 9.80 8.30 6.70, 2 tasks in D"
    )
    # The agent's port is closed now: a call that tried to connect would be refused.
    with pytest.raises(GuestError, match=r"^the guest is hung: .*CPU#6 stuck for 286s"):
        guest.call("kernel")
    with pytest.raises(GuestError, match=r"^the guest is hung: "):
        guest.check()


def test_a_slow_guest_is_not_taken_for_a_hung_one(tmp_path: Path) -> None:
    with pinged_only() as busy:
        guest = Guest(tmp_path, busy.getsockname()[1])
        with pytest.raises(GuestError) as failed:
            guest.call("kernel", timeout=0.2)
        assert str(failed.value) == (
            "no answer to kernel in 0.2 s; the guest itself answers ({'uptime': 12.5, 'cpus': 8})"
        )
        assert guest.hung == ""
        guest.check()  # no error: it answers
        assert guest.call_op({"op": "ping"}) == {"uptime": 12.5, "cpus": 8}


def test_a_guest_without_heartbeat_or_qemu_says_so(tmp_path: Path) -> None:
    guest = Guest(tmp_path, free_port())  # nothing listens
    guest.ping_timeout = 0.2
    guest.process = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    guest.process.wait()
    with pytest.raises(GuestError) as failed:
        guest.check()
    assert str(failed.value) == (
        "the guest is hung: qemu exited with 3; its agent does not answer a ping in 0.2 s; "
        "no heartbeat on its console"
    )


def test_the_kernel_command_line_names_the_state_stage_two_and_the_hosts_tool_cache(
    argv: list[str], tmp_path: Path
) -> None:
    (line,) = option(argv, "-append")
    words = dict(word.partition("=")[::2] for word in line.split() if word.startswith("dracpu."))
    assert words == {
        "dracpu.state": str(tmp_path / "state" / "guest"),
        "dracpu.stage2": str(guest_module.REPO / "tools/bignode/stage2.sh"),
        "dracpu.cache": str(guest_module.CACHE),  # the guest runs the host's cached tools
    }


def test_an_interrupt_while_the_logs_are_saved_still_stops_the_guest_and_the_control_plane(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    stopped = []

    class Interrupted(Guest):
        def call(self, fn: str, timeout: float = 600.0, **kwargs: Any) -> Any:
            raise KeyboardInterrupt  # Ctrl-C while the node's logs are copied

        def stop(self, timeout: float = 30.0) -> None:
            stopped.append("guest")

    def controlplane(*args: str, **_: Any) -> subprocess.CompletedProcess[str]:
        stopped.append(f"control plane {args[0]}")
        return subprocess.CompletedProcess(args, 0, "", "")

    monkeypatch.setattr(cluster_module, "_controlplane", controlplane)
    node = cluster_module.GuestCluster(Interrupted(tmp_path), tmp_path / "controlplane")
    with pytest.raises(KeyboardInterrupt):
        cluster_module.bring_down(node)
    assert stopped == ["guest", "control plane down"]


def test_a_reboot_in_the_guest_resets_the_machine_and_a_panic_halts_it(argv: list[str]) -> None:
    assert "-no-reboot" not in argv  # qemu would exit instead of booting the kernel again
    (line,) = option(argv, "-append")
    assert "panic=0" in line.split()  # no reboot loop: the console's report says hung


def rebooting_agent() -> socket.socket:
    """An agent that answers pings with an uptime of 500 s until it is asked to reboot, then
    stays silent for a moment and answers with the uptime of a fresh boot."""
    server = socket.create_server(("127.0.0.1", 0))
    rebooted = threading.Event()

    def answer(conn: socket.socket) -> None:
        with conn, conn.makefile("rwb") as stream:
            for line in stream:
                op = json.loads(line)["op"]
                if op == "reboot":
                    stream.write(b'{"ok": true}\n')
                    stream.flush()
                    rebooted.set()
                    return
                uptime = 4.5 if rebooted.is_set() else 500.0
                stream.write(json.dumps({"ok": {"uptime": uptime, "cpus": 8}}).encode() + b"\n")
                stream.flush()

    def serve() -> None:
        with contextlib.suppress(OSError):
            while True:
                threading.Thread(target=answer, args=(server.accept()[0],), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return server


def test_a_reboot_returns_once_the_agent_of_the_next_boot_answers(tmp_path: Path) -> None:
    with rebooting_agent() as agent:
        guest = Guest(tmp_path, agent.getsockname()[1])
        assert guest.reboot(timeout=10) == 4.5
