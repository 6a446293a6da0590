"""The processes of a local run, in start order, and how to tell each one is ready.

`service_commands` is the single description of every command line; the docker compose file
is checked against it, so both run the services the same way.
"""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from dracpu.dev.layout import RunLayout
from dracpu.dev.readiness import Readiness

# Start order: each one's dependencies come before it.
SERVICES = (
    "apiserver",
    "topology",
    "allocator",
    "runtime-sim",
    "nri-plugin",
    "dra-plugin",
    "kubelet-sim",
    "api",
)
SIMULATORS = frozenset({"apiserver", "runtime-sim", "kubelet-sim"})

# argv[0] of the simulators (the API-server fake among them): modules, not console scripts.
PYTHON = "python"


@dataclass(frozen=True)
class DevOptions:
    """What `dev up` was asked for, once validated."""

    sysfs_root: Path
    api_address: str = "127.0.0.1:8080"
    config: Path | None = None
    verbosity: int = 0
    kubelet_sim: bool = True
    runtime_sim: bool = True
    kubeconfig: Path | None = None  # an outside API server, instead of the run's fake
    apiserver_address: str = "127.0.0.1:6443"  # where the fake listens (without `kubeconfig`)
    apiserver_url: str | None = None  # the fake as its clients reach it, when not that address


def api_url(address: str) -> str:
    host, _, port = address.rpartition(":")
    return f"http://{host or '127.0.0.1'}:{port}"


def _common(options: DevOptions) -> list[str]:
    # The services' own default is klog's text format; a local run is read by people.
    flags = ["--logging-format=logfmt"]
    if options.config:
        flags += ["--config", str(options.config)]
    if options.verbosity:
        flags += ["-v", str(options.verbosity)]
    return flags


def service_commands(layout: RunLayout, options: DevOptions) -> dict[str, list[str]]:
    """Every process of the run, in start order, with its full command line."""
    sock = layout.socket
    common = _common(options)
    commands: dict[str, list[str]] = {
        "apiserver": [
            PYTHON,
            "-m",
            "dracpu.dev.apiserver",
            "--address",
            options.apiserver_address,
            "--kubeconfig",
            str(layout.apiserver_kubeconfig),
            *(["--server-url", options.apiserver_url] if options.apiserver_url else []),
        ],
        "topology": [
            "dracpu-topology",
            "--socket",
            str(sock("topology")),
            "--sysfs-root",
            str(options.sysfs_root),
            *common,
        ],
        "allocator": [
            "dracpu-allocator",
            "--socket",
            str(sock("allocator")),
            "--topology-socket",
            str(sock("topology")),
            "--state-dir",
            str(layout.state_dir),
            "--cdi-dir",
            str(layout.cdi_dir),
            *common,
        ],
        "runtime-sim": [
            PYTHON,
            "-m",
            "dracpu.dev.runtime_process",
            "--nri-socket",
            str(layout.nri_socket),
            "--control-socket",
            str(layout.runtime_sim_socket),
        ],
        "nri-plugin": [
            "dracpu-nri-plugin",
            "--socket",
            str(sock("nri-plugin")),
            "--allocator-socket",
            str(sock("allocator")),
            "--nri-socket",
            str(layout.nri_socket),
            *common,
        ],
        "dra-plugin": [
            "dracpu-dra-plugin",
            "--socket",
            str(sock("dra-plugin")),
            "--allocator-socket",
            str(sock("allocator")),
            "--kubelet-root-dir",
            str(layout.kubelet_root),
            "--kubeconfig",
            str(options.kubeconfig or layout.apiserver_kubeconfig),
            "--cdi-dir",
            str(layout.cdi_dir),
            *common,
        ],
        "kubelet-sim": [
            PYTHON,
            "-m",
            "dracpu.dev.kubelet_process",
            "--kubelet-root-dir",
            str(layout.kubelet_root),
            "--control-socket",
            str(layout.kubelet_sim_socket),
        ],
        "api": [
            "dracpu-api",
            "--bind-address",
            options.api_address,
            "--topology-socket",
            str(sock("topology")),
            # The read-only socket: the api cannot change allocation state.
            "--allocator-socket",
            str(layout.allocator_read_only_socket),
            "--dra-plugin-socket",
            str(sock("dra-plugin")),
            "--nri-plugin-socket",
            str(sock("nri-plugin")),
            *common,
        ],
    }
    if options.kubeconfig is not None:
        del commands["apiserver"]
    if not options.runtime_sim:
        del commands["runtime-sim"]
    if not options.kubelet_sim:
        del commands["kubelet-sim"]
    return commands


def readiness(
    name: str, layout: RunLayout, url: str, *, kubelet_sim: bool = True, runtime_sim: bool = True
) -> Readiness:
    """How to tell the process `name` is ready; `url` is the api's base URL. Without its
    simulated peer, a plugin is only waited for until it answers: the outside kubelet or
    runtime may connect much later."""
    if name == "nri-plugin" and not runtime_sim:
        return Readiness(grpc_socket=layout.socket(name), any_status=True)
    if name == "dra-plugin" and not kubelet_sim:
        return Readiness(grpc_socket=layout.socket(name), any_status=True)
    if name == "api":
        return Readiness(http_url=f"{url}/healthz")
    if name == "apiserver":
        return Readiness(kubeconfig=layout.apiserver_kubeconfig, http_url="/apis/resource.k8s.io")
    if name == "kubelet-sim":
        return Readiness(grpc_socket=layout.kubelet_sim_socket)
    if name == "runtime-sim":
        return Readiness(grpc_socket=layout.runtime_sim_socket)
    return Readiness(grpc_socket=layout.socket(name))


def executable(argv: list[str]) -> list[str]:
    """The command line to exec: console scripts from this interpreter's environment first,
    so a run from the venv never picks up another installation's scripts."""
    program, rest = argv[0], argv[1:]
    if program == PYTHON:
        return [sys.executable, *rest]
    local = Path(sys.executable).parent / program
    if local.exists():
        return [str(local), *rest]
    found = shutil.which(program)
    return [found or program, *rest]
