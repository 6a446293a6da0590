"""`dracpu dev up`: every service as a local process on one run folder, until Ctrl-C."""

from __future__ import annotations

import asyncio
import errno
import fcntl
import json
import os
import shutil
import signal
import socket
import sys
from pathlib import Path
from typing import IO, Any

import yaml

from dracpu.core.config import read_file
from dracpu.core.errors import ConflictError, InvalidInputError
from dracpu.dev.layout import RunLayout
from dracpu.dev.runtime_process import default_state_file
from dracpu.dev.services import (
    DevOptions,
    api_url,
    executable,
    readiness,
    service_commands,
)
from dracpu.dev.supervisor import ProcessSpec, StartError, Supervisor

EXIT_START_FAILED = 1


def report(line: str) -> None:
    print(f"dracpu dev: {line}", flush=True)


def parse_address(text: str) -> tuple[str, int]:
    host, sep, port_text = text.rpartition(":")
    if not sep or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise InvalidInputError(f"--api-address {text!r}: expected HOST:PORT with a port 1-65535")
    return host or "0.0.0.0", int(port_text)


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now, kept for the API-server fake across its restarts."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
        return port


def check_port_free(address: str) -> None:
    host, port = parse_address(address)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            reason = "is in use" if exc.errno == errno.EADDRINUSE else f"cannot be bound: {exc}"
            raise InvalidInputError(f"--api-address {address} {reason}") from None


def check_kubeconfig(path: str) -> None:
    """A kubeconfig the dra-plugin can load, refused here in one line otherwise."""
    try:
        document = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise InvalidInputError(f"--kubeconfig {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError:
        raise InvalidInputError(f"--kubeconfig {path}: not valid YAML") from None
    if not isinstance(document, dict) or not document.get("clusters"):
        raise InvalidInputError(f"--kubeconfig {path}: no clusters in it")


def lock_run_dir(layout: RunLayout) -> IO[str]:
    """Hold the run folder for this process; a second `dev up` on it is refused."""
    handle = layout.lock_file.open("a+", encoding="utf-8")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
    else:
        return handle
    owner = (run_status(layout) or {}).get("pid")
    who = f" (pid {owner})" if owner else ""
    raise ConflictError(f"run dir {layout.root} is in use by another dracpu dev up{who}")


def run_status(layout: RunLayout) -> dict[str, Any] | None:
    """None when no `dev up` holds the folder; else what it recorded of itself (pid, api URL,
    processes), which is {} until every process has started."""
    if not layout.lock_file.exists():
        return None
    with layout.lock_file.open("a+", encoding="utf-8") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pass  # held: a dev up runs here
        else:
            return None
    try:
        recorded = json.loads(layout.status_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return recorded if isinstance(recorded, dict) else {}


def prepare_sysfs(layout: RunLayout, fixture: str | None, sysfs_root: str | None) -> Path:
    if fixture is None:
        root = Path(sysfs_root or "/sys")
        if not root.is_dir():
            raise InvalidInputError(f"--sysfs-root {root}: not a directory")
        return root.absolute()
    from dracpu.topology.fixtures import FIXTURES, write_fixture

    if fixture not in FIXTURES:
        known = ", ".join(sorted(FIXTURES))
        raise InvalidInputError(f"--fixture {fixture!r}: unknown fixture (known: {known})")
    # A fresh tree every time: the fixture may differ from the previous run's.
    shutil.rmtree(layout.sysfs_dir, ignore_errors=True)
    return write_fixture(fixture, layout.sysfs_dir).absolute()


def owned_sockets(layout: RunLayout, *, kubelet_sim: bool, runtime_sim: bool) -> list[Path]:
    """The sockets this run's own processes listen on, the only ones it may remove.

    Without the runtime simulator the NRI socket is the outside runtime's (a real containerd
    listening on DIR/nri/nri.sock); without the kubelet simulator its control socket is nobody's.
    """
    foreign: set[Path] = set()
    if not runtime_sim:
        foreign |= {layout.nri_socket, layout.runtime_sim_socket}
    if not kubelet_sim:
        foreign.add(layout.kubelet_sim_socket)
    return [path for path in layout.all_sockets() if path not in foreign]


def remove_stale_sockets(sockets: list[Path]) -> list[Path]:
    """Unlink the sockets left by an earlier run of this folder (the lock says none runs)."""
    removed = []
    for path in sockets:
        if path.is_socket():
            path.unlink()
            removed.append(path)
    return removed


def forget_earlier_runs(layout: RunLayout) -> None:
    """Empty what earlier runs left: allocator state, CDI specs, the simulated runtime's
    containers, workloads, logs (the claims lived in the API-server fake's memory)."""
    for directory in (
        layout.state_dir,
        layout.cdi_dir,
        layout.workloads_dir,
        layout.logs_dir,
    ):
        shutil.rmtree(directory, ignore_errors=True)
    default_state_file(str(layout.nri_socket)).unlink(missing_ok=True)
    for directory in layout.directories():
        directory.mkdir(parents=True, exist_ok=True)


def build_specs(layout: RunLayout, options: DevOptions) -> list[ProcessSpec]:
    return [
        ProcessSpec(
            name=name,
            argv=executable(argv),
            readiness=readiness(
                name,
                layout,
                api_url(options.api_address),
                kubelet_sim=options.kubelet_sim,
                runtime_sim=options.runtime_sim,
            ),
            log_file=layout.log_file(name),
        )
        for name, argv in service_commands(layout, options).items()
    ]


async def up(
    layout: RunLayout,
    *,
    fixture: str | None,
    sysfs_root: str | None,
    api_address: str,
    config: str | None,
    verbosity: int,
    kubelet_sim: bool,
    runtime_sim: bool,
    ready_timeout: float,
    fresh: bool = False,
    kubeconfig: str | None = None,
) -> int:
    layout.check()
    if config is not None:
        read_file(config)  # a bad file is refused here, in one line, not by five services
    if kubeconfig is not None:
        check_kubeconfig(kubeconfig)
    parse_address(api_address)
    for directory in layout.directories():
        directory.mkdir(parents=True, exist_ok=True)
    lock = lock_run_dir(layout)
    try:
        if fresh:
            forget_earlier_runs(layout)
        check_port_free(api_address)
        options = DevOptions(
            sysfs_root=prepare_sysfs(layout, fixture, sysfs_root),
            api_address=api_address,
            config=Path(config).absolute() if config else None,
            verbosity=verbosity,
            kubelet_sim=kubelet_sim,
            runtime_sim=runtime_sim,
            kubeconfig=Path(kubeconfig).absolute() if kubeconfig else None,
            apiserver_address=f"127.0.0.1:{free_port()}",
        )
        # An earlier run's kubeconfig names a fake that is gone; this run's writes its own.
        layout.apiserver_kubeconfig.unlink(missing_ok=True)
        sockets = owned_sockets(layout, kubelet_sim=kubelet_sim, runtime_sim=runtime_sim)
        for stale in remove_stale_sockets(sockets):
            report(f"removed stale socket {stale}")
        return await _supervise(layout, options, ready_timeout, sockets)
    finally:
        lock.close()


async def _supervise(
    layout: RunLayout, options: DevOptions, ready_timeout: float, sockets: list[Path]
) -> int:
    url = api_url(options.api_address)
    supervisor = Supervisor(
        build_specs(layout, options),
        report=report,
        ready_timeout=ready_timeout,
        status_file=layout.status_file,
        status_extra={
            "run_dir": str(layout.root),
            "api_url": url,
            "kubeconfig": str(options.kubeconfig or layout.apiserver_kubeconfig),
            "apiserver": "outside" if options.kubeconfig else "fake",
        },
    )
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, supervisor.request_stop)
    report(f"run dir {layout.root}; sysfs {options.sysfs_root}; logs in {layout.logs_dir}")
    try:
        try:
            started = await supervisor.start()
        except StartError as exc:
            print(f"dracpu dev: error: {exc}", file=sys.stderr, flush=True)
            return EXIT_START_FAILED
        if started:
            report(f"ready: api {url} (pid {os.getpid()}; Ctrl-C stops everything)")
            await supervisor.wait()
        report("stopping")
        await supervisor.stop()
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
        remove_stale_sockets(sockets)
    report("stopped")
    return 0
