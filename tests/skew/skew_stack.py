"""A local run of the five services and the two simulators, like `dracpu dev up`, where each
process may come from a different build, and one process can be replaced by another build's
while the rest keep running.

Each build describes its own command lines (its `dracpu.dev.services.service_commands`, asked
through its own interpreter), so a release is started exactly as that release starts itself.
The run folder is held like `dev up` holds it, so `dracpu.dev.workloads` (the simulated
scheduler, kubelet and runtime of `dev claim`) drives it.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import IO, Any

from harness.waits import WaitTimeout, wait_for
from skew_builds import Build

from dracpu.dev.layout import RunLayout
from dracpu.dev.readiness import is_ready
from dracpu.dev.services import SERVICES, SIMULATORS, api_url, readiness

# The five services of the driver; the simulators play the kubelet and runtime.
DRIVER_SERVICES = tuple(name for name in SERVICES if name not in SIMULATORS)
READY_TIMEOUT = 60.0
STOP_TIMEOUT = 10.0
READY_POLL = 0.05  # seconds between readiness checks of a starting service

_COMMANDS = """
import json, sys
from pathlib import Path
from dracpu.dev.layout import RunLayout
from dracpu.dev.services import DevOptions, service_commands
layout = RunLayout.at(sys.argv[1])
options = DevOptions(
    sysfs_root=Path(sys.argv[2]), api_address=sys.argv[3], runtime_sim=sys.argv[4] == "1"
)
if len(sys.argv) > 5:
    options = DevOptions(
        sysfs_root=options.sysfs_root,
        api_address=options.api_address,
        runtime_sim=options.runtime_sim,
        config=Path(sys.argv[5]),
    )
print(json.dumps(service_commands(layout, options)))
"""


def build_commands(
    build: Build,
    layout: RunLayout,
    sysfs: Path,
    address: str,
    runtime_sim: bool,
    config: Path | None = None,
) -> dict[str, Any]:
    """The command line of every process, as `build` itself describes them, with argv[0]
    resolved to that build's interpreter or console script."""
    result = subprocess.run(
        [
            str(build.python),
            "-c",
            _COMMANDS,
            str(layout.root),
            str(sysfs),
            address,
            "1" if runtime_sim else "0",
            *([str(config)] if config is not None else []),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise AssertionError(f"{build.label} cannot describe its command lines: {result.stderr}")
    commands: dict[str, list[str]] = json.loads(result.stdout)
    for argv in commands.values():
        argv[0] = str(build.python if argv[0] == "python" else build.bin / argv[0])
    plugin = commands.get("dra-plugin", [])
    if "--cluster-dir" in plugin:
        # A release whose dev runner gave its dra-plugin a cluster folder: that build reads the
        # API server too, so it is pointed at the run's API-server fake (from this checkout).
        at = plugin.index("--cluster-dir")
        plugin[at : at + 2] = ["--kubeconfig", str(layout.apiserver_kubeconfig)]
    return commands


def log_tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


class Stack:
    """The processes of one run folder; `builds` names the build of each process. Without
    the runtime simulator, the runtime end of the NRI socket is an outside runtime."""

    def __init__(
        self,
        root: Path,
        sysfs: Path,
        port: int,
        builds: dict[str, Build],
        *,
        runtime_sim: bool = True,
        config: Path | None = None,
    ) -> None:
        self.layout = RunLayout.at(root)
        self.config = config  # the driver configuration file every service reads
        self.address = f"127.0.0.1:{port}"
        self.url = api_url(self.address)
        self._sysfs = sysfs
        self.builds = dict(builds)
        self.runtime_sim = runtime_sim
        self.names = [n for n in SERVICES if runtime_sim or n != "runtime-sim"]
        self._commands: dict[str, dict[str, list[str]]] = {}
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self._logs: dict[str, IO[bytes]] = {}
        self._lock: IO[str] | None = None

    # -- processes -------------------------------------------------------------------------

    def command(self, name: str, build: Build) -> list[str]:
        if build.label not in self._commands:
            self._commands[build.label] = build_commands(
                build, self.layout, self._sysfs, self.address, self.runtime_sim, self.config
            )
        return list(self._commands[build.label][name])

    def start_all(self) -> None:
        """Every service, one after another, each ready before the next starts."""
        for directory in self.layout.directories():
            directory.mkdir(parents=True, exist_ok=True)
        self._lock = self.layout.lock_file.open("a+", encoding="utf-8")
        fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        for name in self.names:
            self.start(name, self.builds[name])

    def start(self, name: str, build: Build) -> float:
        """Start `name` from `build` and wait until it is ready; the seconds that took."""
        began = time.monotonic()
        log = self._logs.get(name)
        if log is None:
            log = self._logs[name] = self.layout.log_file(name).open("ab")
        argv = self.command(name, build)
        log.write(f"--- skew: starting {build.label}: {' '.join(argv)}\n".encode())
        log.flush()
        self.processes[name] = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            start_new_session=True,
        )
        self.builds[name] = build
        self._wait_ready(name)
        self._write_status()
        return time.monotonic() - began

    def _wait_ready(self, name: str) -> None:
        process = self.processes[name]
        check = readiness(name, self.layout, self.url, runtime_sim=self.runtime_sim)
        label = self.builds[name].label

        def started() -> str:
            if asyncio.run(is_ready(check)):
                return "ready"
            return "exited" if process.poll() is not None else ""

        try:
            state = wait_for(
                started, f"{name} ({label}) ready", timeout=READY_TIMEOUT, interval=READY_POLL
            )
        except WaitTimeout as exc:
            raise AssertionError(f"{exc}:\n{log_tail(self.layout.log_file(name))}") from None
        if state == "exited":
            raise AssertionError(
                f"{name} ({label}) exited during start "
                f"(code {process.returncode}):\n{log_tail(self.layout.log_file(name))}"
            )

    def stop(self, name: str) -> None:
        process = self.processes.pop(name, None)
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise AssertionError(f"{name} ignored SIGTERM for {STOP_TIMEOUT:.0f}s") from None

    def replace(self, name: str, build: Build) -> float:
        """Stop `name` and start it from `build`; the seconds it was away."""
        began = time.monotonic()
        self.stop(name)
        self.start(name, build)
        return time.monotonic() - began

    def stop_all(self) -> None:
        problems = []
        for name in reversed(self.names):
            try:
                self.stop(name)
            except AssertionError as exc:
                problems.append(str(exc))
        for log in self._logs.values():
            log.close()
        if self._lock is not None:
            self._lock.close()
        self.layout.status_file.unlink(missing_ok=True)
        if problems:
            raise AssertionError("; ".join(problems))

    def pid(self, name: str) -> int:
        return self.processes[name].pid

    def exited(self) -> dict[str, int]:
        """Processes that exited on their own: name -> exit code."""
        return {
            name: code
            for name, process in self.processes.items()
            if (code := process.poll()) is not None
        }

    def log(self, name: str) -> str:
        return self.layout.log_file(name).read_text(errors="replace")

    def _write_status(self) -> None:
        # What `dev up` records of itself: `dev claim` checks the run folder's processes.
        document = {
            "pid": os.getpid(),
            "run_dir": str(self.layout.root),
            "api_url": self.url,
            "services": {
                name: {"pid": process.pid, "build": self.builds[name].label}
                for name, process in self.processes.items()
            },
        }
        temporary = self.layout.status_file.with_suffix(".tmp")
        temporary.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
        temporary.replace(self.layout.status_file)
