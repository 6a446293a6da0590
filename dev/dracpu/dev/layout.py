"""Where everything of one local run lives: the run folder and the paths derived from it.

One run folder holds the sockets, the kubelet root, the NRI socket, the CDI specs, the
allocator's state and the kubeconfig of the API-server fake, so a run needs no root and leaves
nothing outside that folder.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from dracpu.core.driver import DRIVER_NAME
from dracpu.core.errors import InvalidInputError
from dracpu.core.sockets import ALLOCATOR_READ_ONLY_SOCKET, socket_file
from dracpu.dra_plugin.paths import KubeletPaths


def default_run_dir() -> Path:
    # Short and per user: unix socket paths must stay under 108 bytes.
    return Path("/tmp") / f"dracpu-dev-{os.getuid()}"


@dataclass(frozen=True)
class RunLayout:
    """The paths of one run folder (nothing is created by building this)."""

    root: Path

    @classmethod
    def at(cls, run_dir: str | os.PathLike[str]) -> RunLayout:
        return cls(Path(run_dir).expanduser().absolute())

    @property
    def sockets(self) -> Path:
        return self.root / "sockets"

    def socket(self, service: str) -> Path:
        """The gRPC socket of a service (topology, allocator, dra-plugin, nri-plugin)."""
        return self.sockets / socket_file(service)

    @property
    def allocator_read_only_socket(self) -> Path:
        """The allocator's read-only socket (next to its own, as the allocator names it)."""
        return self.sockets / ALLOCATOR_READ_ONLY_SOCKET

    @property
    def kubelet_root(self) -> Path:
        return self.root / "kubelet"

    @property
    def kubelet_paths(self) -> KubeletPaths:
        """The dra-plugin's sockets under the simulated kubelet's root."""
        return KubeletPaths(self.kubelet_root, DRIVER_NAME)

    @property
    def registration_socket(self) -> Path:
        return self.kubelet_paths.registration_socket

    @property
    def dra_socket(self) -> Path:
        return self.kubelet_paths.dra_socket

    @property
    def nri_socket(self) -> Path:
        return self.root / "nri" / "nri.sock"

    @property
    def kubelet_sim_socket(self) -> Path:
        """Control socket of the kubelet simulator (prepare/unprepare on demand)."""
        return self.sockets / "kubelet-sim.sock"

    @property
    def runtime_sim_socket(self) -> Path:
        """Control socket of the runtime simulator (create/stop/remove containers)."""
        return self.sockets / "runtime-sim.sock"

    @property
    def cdi_dir(self) -> Path:
        return self.root / "cdi"

    @property
    def state_dir(self) -> Path:
        return self.root / "state"

    @property
    def apiserver_kubeconfig(self) -> Path:
        """Written by the run's API-server fake (`dracpu.dev.apiserver`) once it listens."""
        return self.root / "apiserver" / "kubeconfig"

    @property
    def sysfs_dir(self) -> Path:
        """Where a named fixture's sysfs tree is written."""
        return self.root / "sysfs"

    @property
    def logs_dir(self) -> Path:
        return self.root / "logs"

    def log_file(self, service: str) -> Path:
        return self.logs_dir / f"{service}.log"

    @property
    def workloads_dir(self) -> Path:
        """What `dev claim` started, so `dev release` can undo it."""
        return self.root / "workloads"

    @property
    def lock_file(self) -> Path:
        """Held (flock) by the one `dev up` running on this folder."""
        return self.root / "dev-up.lock"

    @property
    def status_file(self) -> Path:
        """Written by `dev up`: supervisor pid, service pids, api URL."""
        return self.root / "dev-up.json"

    def all_sockets(self) -> list[Path]:
        return [
            *(self.socket(name) for name in ("topology", "allocator", "dra-plugin", "nri-plugin")),
            self.allocator_read_only_socket,
            self.kubelet_sim_socket,
            self.runtime_sim_socket,
            self.registration_socket,
            self.dra_socket,
            self.nri_socket,
        ]

    def check(self) -> None:
        """Refuse a run folder whose socket paths would not fit a unix socket address."""
        from dracpu.core.rpc import check_socket_path  # here: `dracpu dev --help` needs no gRPC

        for path in self.all_sockets():
            try:
                check_socket_path(path)
            except InvalidInputError as exc:
                raise InvalidInputError(f"run dir {self.root} is too deep: {exc}") from None

    def directories(self) -> list[Path]:
        """Folders `dev up` creates before starting anything."""
        return [
            self.sockets,
            self.registration_socket.parent,
            self.kubelet_paths.plugin_dir,
            self.nri_socket.parent,
            self.cdi_dir,
            self.state_dir,
            self.apiserver_kubeconfig.parent,
            self.logs_dir,
            self.workloads_dir,
        ]
