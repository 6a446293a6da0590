"""What the runtime must offer the driver, judged from what the nri-plugin sees of it.

- NRI: the plugin registers on the runtime's NRI socket. A runtime with NRI off has no socket
  (containerd 1.7 has NRI off by default). Missing when the first connection fails, or when a
  lost one stays lost for longer than a runtime restart takes (NRI_GRACE).
- CDI: the kubelet asks the runtime for the claim's CDI device (`dra.k8s.io/cpu=claim-<uid>`),
  whose spec puts `DRA_CPUSET_<uid>` in the container's env. A runtime with CDI off
  (containerd 1.7 without enable_cdi) starts the container without it, and the plugin then
  sees an unclaimed container. Judged on claimed containers: the first one whose env carries
  a claim (created, or found running at Synchronize) shows CDI works; one the runtime reports
  as asking for our CDI device (the container's CDI devices, NRI v0.10 and newer) without the
  variable shows it does not, once.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from dracpu.core.driver import CDI_KIND, CPUSET_ENV, cpuset_env_name
from dracpu.core.prerequisites import CDI, NRI, Prerequisites
from dracpu.nri_plugin.transport.cri_version import RuntimeIdentity
from dracpu.pb.nri import api_pb2

NRI_GRACE = 30.0  # seconds: a runtime restarting takes its socket away for about this long
CDI_DEVICE_PREFIX = f"{CDI_KIND}=claim-"  # core.driver.cdi_device_id
HOW_NRI = (
    "turn NRI on in the runtime and restart it (containerd: disable = false under [plugins."
    '"io.containerd.nri.v1.nri"], on by default from 2.0; CRI-O: enable_nri = true under '
    "[crio.nri]), or point --nri-socket at its socket; no container is pinned until then"
)
NRI_SETTING = {
    "crio": "enable_nri = true under [crio.nri] (e.g. in a drop-in of /etc/crio/crio.conf.d)",
    "containerd": 'disable = false under [plugins."io.containerd.nri.v1.nri"] (on by default '
    "from 2.0)",
}
HOW_CDI = (
    "turn CDI on in the runtime and restart it (containerd 1.7: enable_cdi = true under [plugins."
    '"io.containerd.grpc.v1.cri"], on by default from 2.0); until then claimed containers run '
    "on the shared CPUs"
)


def how_nri(runtime: RuntimeIdentity | None) -> str:
    """How to turn NRI on: in the words of the runtime the CRI socket named, or of each."""
    if runtime is None:
        return HOW_NRI
    setting = NRI_SETTING.get(runtime.kind)
    if setting is None:
        return f"{runtime} does not serve NRI here: {HOW_NRI}"
    return (
        f"set {setting} and restart {runtime}, or point --nri-socket at its socket; no "
        "container is pinned until then"
    )


def nri_off_line(nri_socket: str, runtime: RuntimeIdentity | None, cri_note: str = "") -> str:
    """The one line the nri-plugin says at its start when the runtime's NRI socket is absent:
    the runtime and its version when its CRI socket named them (`cri_note` says why not)."""
    who = f"{runtime}" if runtime is not None else "the runtime"
    note = f" ({cri_note})" if cri_note else ""
    return f"no NRI socket at {nri_socket}: {who} has NRI off{note}: {how_nri(runtime)}"


class RuntimePrerequisites:
    def __init__(
        self,
        prerequisites: Prerequisites,
        socket: str,
        *,
        grace: float = NRI_GRACE,
        runtime: RuntimeIdentity | None = None,
    ) -> None:
        self.prerequisites = prerequisites
        self.socket = socket
        self.grace = grace
        self.runtime = runtime  # named by the CRI socket, when it was asked and answered
        self._registered_once = False
        self._down_since: float | None = None

    # -- NRI ------------------------------------------------------------------------------------

    def registered(self) -> None:
        self._registered_once = True
        self._down_since = None
        self.prerequisites.met(NRI, f"registered with the runtime's NRI on {self.socket}")

    def connection_failed(self, reason: str) -> None:
        """A connection or registration attempt failed with `reason`."""
        now = time.monotonic()
        if self._down_since is None:
            self._down_since = now
        if self._registered_once and now - self._down_since < self.grace:
            return  # the runtime restarting
        who = f"{self.runtime}" if self.runtime is not None else "the runtime"
        self.prerequisites.missing(
            NRI, f"no NRI connection to {who} ({reason}): {how_nri(self.runtime)}"
        )

    # -- CDI ------------------------------------------------------------------------------------

    def container_seen(
        self, where: str, claims: Mapping[str, object], ctr: api_pb2.Container
    ) -> None:
        """A container `where` (namespace/pod/name), created or found at Synchronize, carries
        `claims` in its env."""
        if claims:
            known = self.prerequisites.get(CDI)
            if known is None or not known.ok:
                self.prerequisites.met(CDI, f"the runtime injected {CPUSET_ENV}_<claim> into "
                                       f"container {where}")  # fmt: skip
            return
        asked = _claim_devices(ctr.CDI_devices)
        known = self.prerequisites.get(CDI)
        if not asked or (known is not None and not known.ok):
            return
        self.prerequisites.missing(
            CDI,
            f"container {where} asks the runtime for CDI device {asked[0]} but its env lacks "
            f"{cpuset_env_name(asked[0].removeprefix(CDI_DEVICE_PREFIX))}: the runtime does not "
            f"inject CDI devices: {HOW_CDI}",
        )


def _claim_devices(devices: Sequence[api_pb2.CDIDevice]) -> list[str]:
    return [d.name for d in devices if d.name.startswith(CDI_DEVICE_PREFIX)]
