"""A real CRI-O + conmon + runc node on private directories, driven with crictl.

`CrioNode` is `ContainerdNode`'s twin for the second runtime (selected for the real-node tier
by DRACPU_RUNTIME=crio): the same pods, containers, kernel views and teardown, only the daemon
differs. CRI-O (built into the cache by tools/build-crio.sh) runs with one configuration file
under the base directory and `--config-dir` pointed at an empty folder there, so nothing of the
host's /etc/crio or /etc/containers is read:

- containers/storage (overlay) root and run root, CRI-O's exits, attach sockets, namespaces,
  version and clean-shutdown files, all under the base;
- cgroupfs as cgroup manager (CRI-O's default is systemd; the hosts this tier runs on have no
  systemd as init), conmon in the pod's cgroup (`conmon_cgroup = "pod"`, what cgroupfs needs);
- runc (the tier's, /usr/sbin/runc) as the only and default runtime with its state under the
  base (CRI-O 1.34 would otherwise default to crun);
- NRI on, listening on the run folder's `nri/nri.sock` (where `dracpu dev up` dials) with the
  same registration and request timeouts as the containerd node;
- CDI specs read from the run folder's `cdi` directory only;
- CNI from the cached cni-plugins (the tier's pods use the host network, none is configured)
  and no host-port mapping (it would need iptables or nft, which these hosts lack);
- the test image as the pause image (`pause_command = "/pause"`).

The test image reaches containers/storage by a pull: `harness.oci_registry.ArchiveRegistry`
serves the cached OCI archive on 127.0.0.1 for the first start, and a registries.conf under the
base maps the image's name to it (plain HTTP); the signature policy accepts it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from harness.containerd_node import (
    IMAGE_NAME,
    RUNC,
    ContainerdNode,
    NodeError,
    crictl_path,
    image_archive,
)
from harness.oci_registry import ArchiveRegistry
from harness.paths import CACHE

CRIO_VERSIONS = ("v1.34.0",)
CONMON = Path("/usr/bin/conmon")
CNI_PLUGINS_VERSION = "v1.10.0"


def crio_dir(version: str) -> Path:
    return CACHE / f"crio-{version}" / "bin"


def missing_crio_tools(version: str = CRIO_VERSIONS[0]) -> str:
    """'' when everything a CRI-O node needs is present, else one line saying what is missing."""
    needs = {
        f"CRI-O {version}": CACHE / f"crio-{version}" / ".complete",
        "crictl": crictl_path(),
        "the test image": image_archive(),
        "runc": RUNC,
        "conmon": CONMON,
    }
    absent = [name for name, path in needs.items() if not path.exists()]
    if absent:
        return (
            f"{', '.join(absent)} missing (run tools/tier-realnode.sh bootstrap and "
            "tools/build-crio.sh as root)"
        )
    return ""


class CrioNode(ContainerdNode):
    """One CRI-O on private directories; see the module docstring."""

    runtime_name = "CRI-O"
    subdirectories = (
        "run",
        "root",
        "runroot",
        "runc",
        "exits",
        "attach",
        "ns",
        "hooks.d",
        "crio.conf.d",
        "cni/conf",
        "nri-plugins",
        "nri-conf.d",
        "podlogs",
        "logs",
    )

    def __init__(
        self, base: Path, run_dir: Path, *, version: str = CRIO_VERSIONS[0], **options: str
    ) -> None:
        """`options`: ContainerdNode's NRI timeouts (plugin_request_timeout, ...)."""
        super().__init__(base, run_dir, version=version, **options)
        self.bin = crio_dir(version)
        self.socket = self.base / "run" / "crio.sock"
        self.config_file = self.base / "crio.conf"
        self.log_file = self.base / "crio.log"
        self.registries_file = self.base / "registries.conf"
        self.policy_file = self.base / "policy.json"
        self.storage_file = self.base / "storage.conf"
        self._registry: ArchiveRegistry | None = None

    # -- configuration ----------------------------------------------------------------------

    def config_text(self) -> str:
        b = self.base
        cni = CACHE / f"cni-plugins-{CNI_PLUGINS_VERSION}" / "bin"
        return f"""# CRI-O {self.version} for the real-node tests
[crio]
root = "{b}/root"
runroot = "{b}/runroot"
storage_driver = "overlay"
log_dir = "{b}/logs"
version_file = "{b}/runroot/version"
version_file_persist = "{b}/root/version"
clean_shutdown_file = "{b}/root/clean.shutdown"

[crio.api]
listen = "{self.socket}"
stream_address = "127.0.0.1"
stream_port = "0"

[crio.runtime]
default_runtime = "runc"
cgroup_manager = "cgroupfs"
conmon = "{CONMON}"
conmon_cgroup = "pod"
cdi_spec_dirs = ["{self.cdi_dir}"]
hooks_dir = ["{b}/hooks.d"]
container_exits_dir = "{b}/exits"
container_attach_socket_dir = "{b}/attach"
namespaces_dir = "{b}/ns"
pinns_path = "{self.bin}/pinns"
irqbalance_config_file = ""
disable_hostport_mapping = true
irqbalance_config_restore_file = "disable"
log_level = "info"
log_to_journald = false

[crio.runtime.runtimes.runc]
runtime_path = "{RUNC}"
runtime_type = "oci"
runtime_root = "{b}/runc"
monitor_path = "{CONMON}"
monitor_cgroup = "pod"

[crio.image]
pause_image = "{IMAGE_NAME}"
pause_command = "/pause"
signature_policy = "{self.policy_file}"

[crio.network]
network_dir = "{b}/cni/conf"
plugin_dirs = ["{cni}"]

[crio.nri]
enable_nri = true
nri_listen = "{self.nri_socket}"
nri_plugin_dir = "{b}/nri-plugins"
nri_plugin_config_dir = "{b}/nri-conf.d"
nri_plugin_registration_timeout = "{self.plugin_registration_timeout}"
nri_plugin_request_timeout = "{self.plugin_request_timeout}"
nri_disable_connections = false
"""

    def registries_text(self, address: str) -> str:
        repository = IMAGE_NAME.rsplit(":", 1)[0]
        return f"""unqualified-search-registries = []

[[registry]]
prefix = "{repository}"
location = "{address}/{repository.split("/", 1)[1]}"
insecure = true
"""

    def write_config(self) -> None:
        super().write_config()
        self.policy_file.write_text(
            json.dumps({"default": [{"type": "insecureAcceptAnything"}]}) + "\n"
        )
        self.storage_file.write_text(
            f'[storage]\ndriver = "overlay"\nrunroot = "{self.base}/runroot"\n'
            f'graphroot = "{self.base}/root"\n'
        )
        address = "127.0.0.1:1"  # nothing to pull from once the image is in storage
        if not (self.base / "root" / "overlay-images").is_dir() and image_archive().exists():
            self._registry = ArchiveRegistry(image_archive())
            self._registry.start()
            address = self._registry.address
        self.registries_file.write_text(self.registries_text(address))

    def daemon_argv(self) -> list[str]:
        return [
            str(self.bin / "crio"),
            "--config",
            str(self.config_file),
            "--config-dir",
            str(self.base / "crio.conf.d"),
            "--registries-conf",
            str(self.registries_file),
            "--registries-conf-dir",
            str(self.base / "crio.conf.d"),
        ]

    def daemon_env(self) -> dict[str, str]:
        return dict(
            os.environ,
            PATH=f"{self.bin}:/usr/sbin:/usr/bin:/sbin:/bin",
            CONTAINERS_STORAGE_CONF=str(self.storage_file),
            CONTAINERS_REGISTRIES_CONF=str(self.registries_file),
        )

    def container_linux(self) -> dict[str, Any]:
        """The pod's namespace options, as the kubelet repeats them for each container: CRI-O
        (no infra container for host-network pods) refuses a container asking for a pod PID
        namespace its sandbox was not given."""
        options = self.pod_config("")["linux"]["security_context"]["namespace_options"]
        return {"security_context": {"namespace_options": options}}

    def remove_pod(self, pod_id: str) -> None:
        """Stop the pod's containers first, as the kubelet does: CRI-O's StopPodSandbox gives
        each container its full stop timeout (30 s), and `sleep` as a container's PID 1
        ignores SIGTERM."""
        ids = self.crictl("ps", "-a", "-q", "--pod", pod_id, check=False).stdout.split()
        if ids:
            self.crictl("stop", "-t", "1", *ids, check=False)
        super().remove_pod(pod_id)

    # -- the test image ---------------------------------------------------------------------

    def image_present(self) -> bool:
        done = self.crictl("inspecti", IMAGE_NAME, check=False)
        return done.returncode == 0

    def import_image(self) -> None:
        """Pull the test image from the archive's registry started by write_config."""
        registry, self._registry = self._registry, None
        if registry is None:
            raise NodeError(f"{IMAGE_NAME} is not in CRI-O's storage and no registry serves it")
        try:
            self.crictl("pull", IMAGE_NAME)
        finally:
            registry.stop()

    def stop(self, timeout: float = 20.0) -> None:
        if self._registry is not None:
            self._registry.stop()
            self._registry = None
        super().stop(timeout)
