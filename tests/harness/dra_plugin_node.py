"""The dra-plugin tier's node: the topology service on a sysfs fixture, the allocator on it
and the dra-plugin on a kubelet root, as processes on short temporary unix sockets, with the
API-server fake (`dracpu.dev.apiserver`) as one more process, holding the node's Node object,
its ResourceClaims as the API server stores them and the slices the plugin publishes.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from dracpu.dev.apiserver.client import ClusterClient
from dracpu.dev.apiserver.process import FakeProcess
from dracpu.topology.fixtures import write_fixture
from harness.services import wait_serving

BIN = Path(sys.executable).parent
NODE = "node-a"
NODE_UID = "0b0d8f2e-0000-4000-8000-00000000000a"


class Node:
    """One node's services in a temp dir: topology, allocator, dra-plugin."""

    def __init__(self, fixture: str = "xeon-2s-ht", sysfs: Path | None = None) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="dp", dir="/tmp"))
        self.sysfs = sysfs or write_fixture(fixture, self.root / "sys")
        self.kubelet_root = self.root / "k"
        self.cdi = self.root / "cdi"
        self.state = self.root / "state"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        # The fake's process, started with the first use of the API server; or None when the
        # test serves one itself (`use_apiserver`).
        self.apiserver: FakeProcess | None = FakeProcess(self.root / "apiserver")
        self.kubeconfig = self.apiserver.kubeconfig
        self._cluster: ClusterClient | None = None
        self.configure()

    def use_apiserver(self, kubeconfig: Path) -> None:
        """The plugin talks to this API server (a test's own, in its process), not the fake's
        process; the test puts the Node object there itself."""
        self.apiserver = None
        self.kubeconfig = kubeconfig

    @property
    def cluster(self) -> ClusterClient:
        """The API server, as the scheduler and the users see it (the fake started if needed)."""
        if self._cluster is None:
            if self.apiserver is not None:
                self.apiserver.start()
                self._cluster = self.apiserver.client()
                self._cluster.create_node(NODE, NODE_UID)
            else:
                self._cluster = ClusterClient(self.kubeconfig)
        return self._cluster

    def sock(self, name: str) -> Path:
        return self.root / f"{name}.sock"

    def log(self, name: str) -> Path:
        return self.root / f"{name}.log"

    def configure(self, **fields: Any) -> None:
        """Write the driver configuration file every service reads."""
        document = {"apiVersion": "v1alpha1", "hostnameOverride": NODE, **fields}
        (self.root / "config.yaml").write_text(yaml.safe_dump(document))

    def _spawn(self, name: str, argv: list[str]) -> None:
        with self.log(name).open("ab") as out:
            self.procs[name] = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    async def wait_serving(self, name: str, socket: Path) -> None:
        """Wait until service `name` serves on `socket`; fail with its log if it exits first."""
        await wait_serving(socket, self.procs[name], what=name, log=self.log(name), timeout=30)

    def topology_argv(self, *extra: str) -> list[str]:
        return [
            str(BIN / "dracpu-topology"), "--socket", str(self.sock("topology")),
            "--sysfs-root", str(self.sysfs), "-v", "2", *extra,
        ]  # fmt: skip

    def allocator_argv(self, *extra: str) -> list[str]:
        return [
            str(BIN / "dracpu-allocator"), "--socket", str(self.sock("allocator")),
            "--topology-socket", str(self.sock("topology")), "--state-dir", str(self.state),
            "--cdi-dir", str(self.cdi), "--config", str(self.root / "config.yaml"),
            "-v", "4", *extra,
        ]  # fmt: skip

    def plugin_argv(self, *extra: str) -> list[str]:
        self.cluster  # noqa: B018 - the API server answers before the plugin loads its kubeconfig
        return [
            str(BIN / "dracpu-dra-plugin"), "--socket", str(self.sock("plugin")),
            "--allocator-socket", str(self.sock("allocator")),
            "--kubelet-root-dir", str(self.kubelet_root), "--kubeconfig", str(self.kubeconfig),
            "--cdi-dir", str(self.cdi), "--config", str(self.root / "config.yaml"),
            "--poll-interval", "0.2", "--resync-interval", "1", "-v", "4", *extra,
        ]  # fmt: skip

    async def start_topology(self, *extra: str) -> None:
        self._spawn("topology", self.topology_argv(*extra))
        await self.wait_serving("topology", self.sock("topology"))

    async def start_allocator(self, *extra: str) -> None:
        self._spawn("allocator", self.allocator_argv(*extra))
        await self.wait_serving("allocator", self.sock("allocator"))

    async def start_plugin(self, *extra: str) -> None:
        self._spawn("plugin", self.plugin_argv(*extra))
        await self.wait_serving("plugin", self.sock("plugin"))

    async def start(self, *allocator_flags: str) -> None:
        """All three at once, as a pod's containers start (each waits for the one it dials),
        then each waited for: interpreter start-ups overlap instead of adding up."""
        self._spawn("topology", self.topology_argv())
        self._spawn("allocator", self.allocator_argv(*allocator_flags))
        self._spawn("plugin", self.plugin_argv())
        await self.wait_serving("topology", self.sock("topology"))
        await self.wait_serving("allocator", self.sock("allocator"))
        await self.wait_serving("plugin", self.sock("plugin"))

    def stop(self, name: str, sig: int = signal.SIGTERM) -> None:
        proc = self.procs.pop(name, None)
        if proc is not None and proc.poll() is None:
            proc.send_signal(sig)
            _reap(proc)

    def close(self) -> None:
        """Every service told to stop at once (their shutdowns overlap), then each waited for."""
        running = [proc for proc in self.procs.values() if proc.poll() is None]
        self.procs.clear()
        for proc in running:
            proc.send_signal(signal.SIGTERM)
        for proc in running:
            _reap(proc)
        if self._cluster is not None and self.apiserver is None:
            self._cluster.close()
        if self.apiserver is not None:
            self.apiserver.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def write_claim(self, claim: dict[str, Any]) -> dict[str, Any]:
        """Create the claim (replacing one of that name) with its status, as the scheduler
        leaves it; answers it as stored."""
        return self.cluster.write_claim(claim)

    def read_claim(self, namespace: str, name: str) -> dict[str, Any]:
        return self.cluster.read_claim(namespace, name)

    def delete_claim(self, namespace: str, name: str) -> None:
        self.cluster.delete_claim(namespace, name)

    def slices(self) -> list[dict[str, Any]]:
        return self.cluster.slices()


def claim(
    name: str,
    uid: str,
    results: list[dict[str, Any]] | None,
    *,
    namespace: str = "default",
    config: list[dict[str, Any]] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A ResourceClaim as the API server stores it; results=None means not allocated."""
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "uid": uid}
    if annotations:
        metadata["annotations"] = annotations
    obj: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": metadata,
        "spec": {"devices": {"requests": []}},
        "status": {},
    }
    if results is not None:
        devices: dict[str, Any] = {"results": results}
        if config:
            devices["config"] = config
        obj["status"]["allocation"] = {"devices": devices}
    return obj


def result(
    device: str,
    *,
    request: str = "cpus",
    cpus: int | None = None,
    driver: str = "dra.cpu",
    **kw: Any,
) -> dict[str, Any]:
    entry: dict[str, Any] = {"request": request, "driver": driver, "pool": NODE, "device": device}
    if cpus is not None:
        entry["consumedCapacity"] = {"dra.cpu/cpu": str(cpus)}
    entry.update(kw)
    return entry


def _reap(proc: subprocess.Popen[bytes]) -> None:
    """Wait for a process told to stop; killed when it has not within 10 s."""
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
