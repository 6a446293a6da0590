"""A running stack of one build holding three claims, their containers and a shared
container: the starting point of every skew and upgrade case."""

from __future__ import annotations

import shutil
import socket
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import skew_bench
from harness.waits import wait_for
from skew_bench import Bench, exercise, swap
from skew_builds import Build
from skew_stack import SERVICES, Stack

from dracpu.topology.fixtures import write_fixture

FIXTURE = "xeon-2s-ht"  # 2 sockets x 10 cores x 2 threads, one NUMA node per socket


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass
class Run:
    stack: Stack
    bench: Bench
    base: Build


def running(base: Build, head: Build) -> Iterator[Run]:
    """Every process from `base` (the simulators and the API-server fake from this checkout:
    they play the kubelet, the runtime and the API server), with three claims, their containers
    and a shared container."""
    root = Path(tempfile.mkdtemp(dir="/tmp", prefix="dracpu-skew-"))
    sysfs = write_fixture(FIXTURE, root / "sysfs")
    builds = {name: base for name in SERVICES} | {
        "apiserver": head, "kubelet-sim": head, "runtime-sim": head,
    }  # fmt: skip
    stack = Stack(root / "run", sysfs, free_port(), builds)
    keep = True
    try:
        stack.start_all()
        bench = Bench(stack)
        wait_for(
            lambda: "plugin registered" in stack.log("kubelet-sim"),
            "the kubelet simulator to register the plugin",
            timeout=skew_bench.SETTLE_TIMEOUT,
        )
        bench.claim(2)
        bench.claim(4, numa=1)
        bench.claim(2)
        bench.start_shared()
        bench.check()
        yield Run(stack, bench, base)
        assert not bench.failed_prepares, bench.failed_prepares
        refused = [reason for build, reason in bench.refused_pins if build == head.label]
        assert not refused, f"this checkout's nri-plugin refused containers: {refused}"
        for build, reason in bench.refused_pins:
            print(f"skew: {build} nri-plugin refused a container, created again: {reason}")
        keep = False
    finally:
        stack.stop_all()
        if keep:
            print(f"skew: logs kept in {stack.layout.logs_dir}")
        else:
            shutil.rmtree(root, ignore_errors=True)


def visit(bench: Bench, service: str, guest: Build, home: Build) -> None:
    """Run `service` from `guest` on a node of `home` and exercise the node, then put the
    node's own build back and exercise it again. A failure puts it back first, so the next
    case starts clean."""
    ok = False
    try:
        away = swap(bench, service, guest)
        print(f"skew: {service} {home.label} -> {guest.label}: away {away:.2f}s")
        exercise(bench)
        ok = True
    finally:
        if not ok:
            bench.stack.replace(service, home)
    swap(bench, service, home)
    exercise(bench)
