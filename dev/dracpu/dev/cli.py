"""`dracpu dev`: run the whole driver locally (up), and play scheduler, kubelet and runtime
for one claim at a time (claim, release); `status` shows what runs."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from dracpu.core.cli import ArgumentParser, run_async
from dracpu.core.errors import InvalidInputError
from dracpu.dev.layout import RunLayout, default_run_dir

PROG = "dracpu dev"
SUMMARY = "run all services locally (dev up, dev claim, dev release)"
# The run folder inside the containers of compose/docker-compose.yaml.
COMPOSE_RUN_DIR = "/dracpu-dev"


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid count {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {value}")
    return value


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {value}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid duration {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def _run_dir(sub: argparse.ArgumentParser) -> None:
    sub.add_argument(
        "--run-dir",
        metavar="DIR",
        help="run folder: sockets, kubelet root, NRI socket, CDI, state, the API-server fake's "
        "kubeconfig "
        f"(default {default_run_dir()})",
    )


def _add_up(commands: argparse._SubParsersAction[ArgumentParser]) -> None:
    up = commands.add_parser("up", help="start every service locally until Ctrl-C")
    _run_dir(up)
    source = up.add_mutually_exclusive_group()
    source.add_argument("--fixture", metavar="NAME", help="a named synthetic machine")
    source.add_argument("--sysfs-root", metavar="DIR", help="sysfs to read (default /sys)")
    up.add_argument(
        "--api-address",
        default="127.0.0.1:8080",
        metavar="HOST:PORT",
        help="where the api listens (default %(default)s)",
    )
    up.add_argument("--config", metavar="FILE", help="driver configuration for every service")
    up.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="publish slices to and read claims from this API server instead of the run's "
        "in-memory fake (the kubelet simulator still prepares: dracpu dev prepare)",
    )
    up.add_argument(
        "--no-kubelet-sim",
        dest="kubelet_sim",
        action="store_false",
        help="do not start the kubelet simulator (an outside kubelet uses DIR/kubelet)",
    )
    up.add_argument(
        "--no-runtime-sim",
        dest="runtime_sim",
        action="store_false",
        help="do not start the runtime simulator (an outside runtime serves DIR/nri/nri.sock)",
    )
    up.add_argument(
        "--ready-timeout",
        type=_seconds,
        default=30.0,
        metavar="SECONDS",
        help="how long each service may take to become ready (default %(default)s)",
    )
    up.add_argument(
        "--fresh",
        action="store_true",
        help="forget earlier runs in DIR first: claims, allocator state, CDI specs, logs",
    )
    up.add_argument("-v", "--v", dest="verbosity", type=_non_negative, default=0, metavar="N")


def _add_claim_commands(commands: argparse._SubParsersAction[ArgumentParser]) -> None:
    claim = commands.add_parser(
        "claim", help="allocate, prepare and run a claim of N CPUs (and memory of their node)"
    )
    _run_dir(claim)
    claim.add_argument(
        "--cpus", type=_positive, required=True, metavar="N", help="how many CPUs to claim"
    )
    claim.add_argument("--numa", type=_non_negative, metavar="ID", help="only this NUMA node")
    claim.add_argument("--name", metavar="NAME", help="claim name (default cpus-<n>)")
    claim.add_argument("--namespace", default="default", metavar="NS", help="default: default")
    claim.add_argument(
        "--cpuset",
        metavar="CPUS",
        help="the exact CPUs (allocator external only, sent as the claim's opaque config)",
    )
    claim.add_argument(
        "--memory-placement",
        choices=["local", "none"],
        help="the claim's opaque cpuConfig.memoryPlacement (default: unset, the driver's)",
    )
    claim.add_argument(
        "--shared-pool",
        choices=["include", "exclude"],
        help="the claim's opaque cpuConfig.sharedPool: include runs its container on the shared "
        "pool too (default: unset, exclude)",
    )
    claim.add_argument(
        "--memory",
        metavar="AMOUNT",
        help="also claim this much memory (dra.cpu/memory, e.g. 256Mi) of the NUMA node of the "
        "CPUs, from its memory device (publishMemoryDevices)",
    )
    claim.add_argument(
        "--hugepages",
        action="append",
        default=[],
        metavar="SIZE=AMOUNT",
        help="also claim AMOUNT of SIZE hugepages of the NUMA node of the CPUs (e.g. 2Mi=32Mi, "
        "16 pages); repeat for another page size",
    )
    claim.add_argument(
        "--pod-uid",
        metavar="UID",
        help="the pod the claim is reserved for (status.reservedFor), e.g. a pod a real "
        "runtime runs; default a new UID, the pod the runtime simulator then creates",
    )

    release = commands.add_parser("release", help="stop the claim's container and unprepare it")
    _run_dir(release)
    release.add_argument("name", metavar="NAME")
    release.add_argument("--namespace", default="default", metavar="NS")

    prepare = commands.add_parser(
        "prepare",
        help="have the kubelet simulator prepare a claim of the API server (--kubeconfig)",
    )
    _run_dir(prepare)
    prepare.add_argument("name", metavar="NAME")
    prepare.add_argument("--namespace", default="default", metavar="NS")
    unprepare = commands.add_parser(
        "unprepare", help="have the kubelet simulator unprepare a claim of the API server"
    )
    _run_dir(unprepare)
    unprepare.add_argument("name", metavar="NAME")
    unprepare.add_argument("--namespace", default="default", metavar="NS")


def _add_apiserver(commands: argparse._SubParsersAction[ArgumentParser]) -> None:
    # Listed here; its own parser (`dracpu.dev.apiserver.server`) reads its flags (see main).
    commands.add_parser(
        "apiserver",
        help="serve the in-memory API-server fake alone (dev up starts one itself); "
        "see dracpu dev apiserver --help",
        add_help=False,
    )


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog=PROG, description=__doc__)
    parser.add_argument(
        "--compose",
        action="store_true",
        help="claim and release on a docker compose stack (its `dev` service runs this): "
        f"the simulators are compose services, the run folder defaults to {COMPOSE_RUN_DIR}",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_up(commands)
    _add_claim_commands(commands)
    _add_apiserver(commands)
    status = commands.add_parser("status", help="show the services of a running dev up")
    _run_dir(status)
    status.add_argument("--json", action="store_true", help="machine-readable output")
    return parser


async def _dispatch(args: argparse.Namespace) -> int:
    if args.compose and args.command not in ("claim", "release"):
        raise InvalidInputError(f"--compose: only claim and release, not {args.command}")
    default = COMPOSE_RUN_DIR if args.compose else default_run_dir()
    layout = RunLayout.at(args.run_dir or default)
    if args.command == "up":
        from dracpu.dev.up import up

        return await up(
            layout,
            fixture=args.fixture,
            sysfs_root=args.sysfs_root,
            api_address=args.api_address,
            config=args.config,
            verbosity=args.verbosity,
            kubelet_sim=args.kubelet_sim,
            runtime_sim=args.runtime_sim,
            ready_timeout=args.ready_timeout,
            fresh=args.fresh,
            kubeconfig=args.kubeconfig,
        )
    if args.command == "status":
        from dracpu.dev.status import collect, render

        document = await collect(layout)
        print(json.dumps(document, indent=2) if args.json else render(document))
        return 0 if document["running"] else 1
    if args.command in ("prepare", "unprepare"):
        from dracpu.dev.api_claims import prepare, unprepare

        act = prepare if args.command == "prepare" else unprepare
        print(await act(layout, name=args.name, namespace=args.namespace))
        return 0
    from dracpu.dev.workloads import claim, release

    if args.command == "claim":
        outcome = await claim(
            layout,
            cpus=args.cpus,
            numa=args.numa,
            name=args.name,
            namespace=args.namespace,
            cpuset=args.cpuset,
            compose=args.compose,
            pod_uid=args.pod_uid,
            memory_placement=args.memory_placement,
            memory=args.memory,
            hugepages=args.hugepages,
            shared_pool=args.shared_pool,
        )
        print(outcome.describe())
        return 0
    if args.command == "release":
        print(await release(layout, name=args.name, namespace=args.namespace, compose=args.compose))
        return 0
    raise InvalidInputError(f"unknown command {args.command!r}")


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    if words[:1] == ["apiserver"]:  # a blocking server of its own, outside the event loop
        from dracpu.dev.apiserver.server import main as serve

        return serve(words[1:])
    args = build_parser().parse_args(words)
    return run_async(lambda: _dispatch(args), PROG)


if __name__ == "__main__":
    raise SystemExit(main())
