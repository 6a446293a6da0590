"""Where the kubelet's plugin watcher and our DRA endpoint live under the kubelet root."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dracpu.core.driver import DRIVER_NAME
from dracpu.core.errors import ConfigError
from dracpu.core.sockets import MAX_SOCKET_PATH

DEFAULT_KUBELET_ROOT = "/var/lib/kubelet"


@dataclass(frozen=True)
class KubeletPaths:
    """The socket layout the kubelet expects for one DRA driver (PROTOCOLS.md §1.3)."""

    root: Path
    driver: str = DRIVER_NAME

    @property
    def registrar_dir(self) -> Path:
        # A directory of our own: the kubelet's plugin watcher also watches the subdirectories
        # of plugins_registry (pluginwatcher/plugin_watcher.go traversePluginDir), so the
        # chart mounts only this one, not every plugin's registration socket.
        return self.root / "plugins_registry" / self.driver

    @property
    def registration_socket(self) -> Path:
        return self.registrar_dir / f"{self.driver}-reg.sock"

    @property
    def plugin_dir(self) -> Path:
        return self.root / "plugins" / self.driver

    @property
    def dra_socket(self) -> Path:
        return self.plugin_dir / "dra.sock"

    @property
    def metadata_dir(self) -> Path:
        return self.plugin_dir / "dra-device-metadata"

    def check(self) -> None:
        """Refuse a kubelet root whose sockets would not fit sun_path, saying how much fits."""
        for socket in (self.registration_socket, self.dra_socket):
            size = len(str(socket).encode())
            if size <= MAX_SOCKET_PATH:
                continue
            root_size = len(str(self.root).encode())
            budget = MAX_SOCKET_PATH - (size - root_size)
            raise ConfigError(
                f"--kubelet-root-dir {self.root}: socket path {socket} is {size} bytes, over "
                f"the {MAX_SOCKET_PATH}-byte unix socket limit; the kubelet root may use at most "
                f"{budget} bytes and uses {root_size}"
            )
