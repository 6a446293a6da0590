"""The runtime simulator as a process of a local run: the runtime end of the NRI socket, plus a
control socket on which `dev claim` / `dev release` create, stop and remove containers.

    python -m dracpu.dev.runtime_process --nri-socket PATH --control-socket PATH

Like a real runtime, it keeps its pods and containers across its own restarts (in a state
file, by default next to the NRI socket), so a restarted simulator synchronizes the NRI plugin
with the containers that were running.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
from collections.abc import Sequence
from pathlib import Path

import grpc
from google.protobuf import json_format

from dracpu.core.cli import ArgumentParser, run_async
from dracpu.core.driver import DRIVER_NAME
from dracpu.core.errors import InvalidInputError, NotFoundError, UnavailableError
from dracpu.core.files import write_atomic
from dracpu.core.log import get_logger, setup
from dracpu.core.rpc import rpc_errors, start_server
from dracpu.dev.runtime_sim import RuntimeSim
from dracpu.dev.sim_control import RUNTIME_SERVICE, Body, control_handler
from dracpu.pb.nri import api_pb2

log = get_logger(__name__)

# How long a create waits for the driver's NRI plugin to be admitted: a container created
# without it would run unpinned, which is never what `dev claim` wants.
PLUGIN_WAIT = 10.0


def _container(body: Body) -> dict[str, str]:
    container = body.get("container")
    if not isinstance(container, dict):
        raise InvalidInputError("request without a container")
    for key in ("container_id", "pod_uid", "pod_namespace", "pod_name", "container_name"):
        if not container.get(key):
            raise InvalidInputError(f"container without {key}")
    return {key: str(value) for key, value in container.items()}


def default_state_file(nri_socket: str) -> Path:
    return Path(nri_socket).parent / "runtime-sim-state.json"


class RuntimeProcess:
    def __init__(self, runtime: RuntimeSim, state_file: Path) -> None:
        self._runtime = runtime
        self._state_file = state_file

    def load(self) -> int:
        """Take back the pods and containers of an earlier life; how many containers."""
        try:
            document = json.loads(self._state_file.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return 0
        except (OSError, ValueError) as exc:
            log.warning(
                "state file unreadable; starting empty", file=str(self._state_file), error=str(exc)
            )
            return 0
        for pod in document.get("pods", []):
            sandbox = json_format.ParseDict(pod, api_pb2.PodSandbox())
            self._runtime.pods[sandbox.id] = sandbox
        for container in document.get("containers", []):
            ctr = json_format.ParseDict(container, api_pb2.Container())
            self._runtime.containers[ctr.id] = ctr
        return len(self._runtime.containers)

    def save(self) -> None:
        document = {
            "pods": [json_format.MessageToDict(p) for p in self._runtime.pods.values()],
            "containers": [json_format.MessageToDict(c) for c in self._runtime.containers.values()],
        }
        # Durable: the stand-in's containers outlive its restarts as a runtime's do.
        write_atomic(self._state_file, json.dumps(document).encode(), durable=True)

    def _pod(self, container: dict[str, str]) -> str:
        # The pod UID is the sandbox id too: stable across restarts of the simulator.
        uid = container["pod_uid"]
        if uid not in self._runtime.pods:
            self._runtime.pods[uid] = api_pb2.PodSandbox(
                id=uid, name=container["pod_name"], namespace=container["pod_namespace"], uid=uid
            )
        return uid

    def _known(self, container_id: str) -> None:
        if container_id not in self._runtime.containers:
            raise NotFoundError(f"container {container_id} is not known to the runtime")

    @rpc_errors
    async def CreateContainer(self, body: Body, context: grpc.aio.ServicerContext) -> Body:
        container = _container(body)
        env = [str(entry) for entry in body.get("env") or []]
        try:
            await self._runtime.wait_plugin(DRIVER_NAME, timeout=PLUGIN_WAIT)
        except TimeoutError:
            raise UnavailableError(
                f"the {DRIVER_NAME} NRI plugin is not connected to the runtime simulator"
            ) from None
        cid = await self._runtime.create_container(
            self._pod(container),
            container["container_name"],
            env,
            container_id=container["container_id"],
        )
        self.save()
        cpus = self._runtime.cpus(cid)
        log.info(2, "container created", container=cid, cpus=cpus)
        return {"container_id": cid, "cpus": cpus}

    @rpc_errors
    async def StopContainer(self, body: Body, context: grpc.aio.ServicerContext) -> Body:
        cid = _container(body)["container_id"]
        self._known(cid)
        await self._runtime.stop_container(cid)
        self.save()
        log.info(2, "container stopped", container=cid)
        return {}

    @rpc_errors
    async def RemoveContainer(self, body: Body, context: grpc.aio.ServicerContext) -> Body:
        cid = _container(body)["container_id"]
        self._known(cid)
        await self._runtime.remove_container(cid)
        self.save()
        log.info(2, "container removed", container=cid)
        return {}

    @rpc_errors
    async def ListContainers(self, body: Body, context: grpc.aio.ServicerContext) -> Body:
        return {"containers": self._runtime.cpusets()}


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="python -m dracpu.dev.runtime_process", description=__doc__)
    parser.add_argument("--nri-socket", required=True, metavar="PATH")
    parser.add_argument("--control-socket", required=True, metavar="PATH")
    parser.add_argument(
        "--state-file",
        metavar="PATH",
        help="pods and containers kept across restarts (default: next to the NRI socket)",
    )
    parser.add_argument("-v", "--v", dest="verbosity", type=int, default=0, metavar="N")
    return parser


async def serve(nri_socket: str, control_socket: str, state_file: Path) -> int:
    runtime = RuntimeSim(nri_socket)
    process = RuntimeProcess(runtime, state_file)
    restored = process.load()

    def register(server: grpc.aio.Server) -> None:
        methods = {
            "CreateContainer": process.CreateContainer,
            "StopContainer": process.StopContainer,
            "RemoveContainer": process.RemoveContainer,
            "ListContainers": process.ListContainers,
        }
        server.add_generic_rpc_handlers((control_handler(RUNTIME_SERVICE, methods),))

    await runtime.start()
    server, health = await start_server(
        control_socket, register, service="runtime-sim", api_version="v1"
    )
    await health.set(True)
    log.info(0, "runtime simulator listening", nri_socket=nri_socket, containers=restored)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()
    await server.stop(grace=1.0)
    with contextlib.suppress(Exception):
        await runtime.stop()
    Path(control_socket).unlink(missing_ok=True)
    Path(nri_socket).unlink(missing_ok=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup(args.verbosity, "runtime-sim", fmt="logfmt")
    state_file = Path(args.state_file) if args.state_file else default_state_file(args.nri_socket)
    return run_async(lambda: serve(args.nri_socket, args.control_socket, state_file), "runtime-sim")


if __name__ == "__main__":
    raise SystemExit(main())
