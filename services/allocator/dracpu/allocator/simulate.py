"""`dracpu simulate`: preview the CPUs a request would get on a node, from its gatherinfo report.

It calls the allocator's own `take_cpus`, so the preview is the service's answer for the same
free CPUs. Prints the cpuset (or JSON with the NUMA nodes, sockets and uncore caches it
touches, and the memory nodes the claim's container would get); an unmet request is one
line on stderr and exit code 1, bad input exit code 2.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dracpu.allocator.domain.isolation import CHOICES as ISOLATION_CHOICES
from dracpu.allocator.domain.isolation import take_with_isolation
from dracpu.core.cli import ArgumentParser, run
from dracpu.core.config import MEMORY_PLACEMENTS
from dracpu.core.cpuset import CPUSet
from dracpu.core.errors import CPUSetError, InvalidInputError

if TYPE_CHECKING:
    from dracpu.core.machine import Machine

PROG = "dracpu simulate"
SUMMARY = "preview a CPU placement on a gatherinfo report"


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog=PROG,
        description="Preview the CPUs the allocator would pick for a request on a node.",
    )
    parser.add_argument(
        "--topology",
        required=True,
        metavar="FILE",
        help="a `dracpu gatherinfo` report (YAML), or JSON with a top-level `cpus` list",
    )
    parser.add_argument("--count", required=True, type=int, metavar="N", help="CPUs to place")
    parser.add_argument(
        "--available",
        metavar="CPUSET",
        help="CPUs that are free (default: every CPU of the topology minus --reserved)",
    )
    parser.add_argument(
        "--reserved", metavar="CPUSET", default="", help="CPUs never handed out (default: none)"
    )
    parser.add_argument(
        "--strategy",
        choices=("packed", "spread"),
        default="packed",
        help="packed fills cores first; spread puts threads on different cores first",
    )
    parser.add_argument(
        "--no-align-uncore",
        action="store_true",
        help="do not prefer CPUs that share an uncore (L3) cache",
    )
    parser.add_argument(
        "--distribute-numa",
        action="store_true",
        help="spread the CPUs evenly over the fewest NUMA nodes that balance them",
    )
    parser.add_argument(
        "--group-size",
        type=int,
        metavar="N",
        help="with --distribute-numa: hand CPUs out in groups of N (default 1)",
    )
    parser.add_argument("--full-pcpus-only", action="store_true", help="only whole physical cores")
    parser.add_argument(
        "--isolated",
        choices=ISOLATION_CHOICES,
        help="as cpuConfig.isolated: the kernel's isolated CPUs of the topology "
        "(default: other CPUs first)",
    )
    parser.add_argument(
        "--memory-placement",
        choices=MEMORY_PLACEMENTS,
        default="none",
        help="as cpuConfig.memoryPlacement: local also prints the memory nodes (cpuset.mems) "
        "the container would get (default: none, every node)",
    )
    parser.add_argument("--json", action="store_true", help="print a JSON object")
    return parser


def load_machine(path: str) -> Machine:
    # Imported here, as in simulate(): `--help` and bad flags need none of it.
    import yaml

    from dracpu.core.machine import Machine

    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidInputError(f"cannot read topology {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise InvalidInputError(f"topology {path} is not UTF-8 text") from None
    try:
        # JSON is read by the YAML parser too; a report may be one document of a stream.
        documents = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" at line {where.line + 1}" if where is not None else ""
        raise InvalidInputError(f"topology {path} is neither YAML nor JSON{line}") from None
    if len(documents) != 1:
        raise InvalidInputError(
            f"topology {path} holds {len(documents)} documents; give one node's report"
        )
    return Machine.from_report(documents[0], source=path)


def parse_cpuset(flag: str, text: str) -> CPUSet:
    try:
        return CPUSet.parse(text)
    except CPUSetError as exc:
        raise InvalidInputError(f"{flag}: {exc}") from None


def within_topology(flag: str, cpus: CPUSet, machine: Machine) -> CPUSet:
    unknown = cpus - machine.cpu_set
    if unknown:
        raise InvalidInputError(f"{flag}: CPUs {unknown.format()} are not in the topology")
    return cpus


def memory_nodes(machine: Machine, cpus: CPUSet, placement: str) -> CPUSet:
    """The container's memory nodes, as the allocator records them: empty when not placed."""
    return machine.numa_nodes_of(cpus) if placement == "local" else CPUSet()


def placement(machine: Machine, cpus: CPUSet, memory: str = "none") -> dict[str, Any]:
    chosen = [machine.by_id[cpu] for cpu in cpus]
    result: dict[str, Any] = {
        "cpus": cpus.format(),
        "numaNodes": sorted({c.numa_node_id for c in chosen}),
        "sockets": sorted({c.socket_id for c in chosen}),
        "uncoreCaches": sorted({c.uncore_cache_id for c in chosen if c.uncore_cache_id >= 0}),
        # cpuset format as in /v1/claims: "" when the memory is not placed (every node).
        "memoryNodes": memory_nodes(machine, cpus, memory).format(),
    }
    if machine.isolated:
        result["isolated"] = (cpus & machine.isolated).format()
    return result


def simulate(args: argparse.Namespace) -> int:
    from dracpu.allocator.algorithm import Policy

    machine = load_machine(args.topology)
    reserved = within_topology("--reserved", parse_cpuset("--reserved", args.reserved), machine)
    available = (
        machine.cpu_set
        if args.available is None
        else within_topology("--available", parse_cpuset("--available", args.available), machine)
    )
    policy = Policy(
        strategy=args.strategy,
        align_uncore=not args.no_align_uncore,
        full_pcpus_only=args.full_pcpus_only,
        distribute_numa=args.distribute_numa,
        group_size=1 if args.group_size is None else args.group_size,
    )
    cpus = take_with_isolation(machine, available - reserved, args.count, policy, args.isolated)
    if args.json:
        print(json.dumps(placement(machine, cpus, args.memory_placement)))
    else:
        print(cpus.format())
        if args.memory_placement == "local":
            print(f"memory nodes {memory_nodes(machine, cpus, 'local').format()}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.group_size is not None and not args.distribute_numa:
        parser.error("argument --group-size: only applies with --distribute-numa")
    return run(lambda: simulate(args), PROG)


if __name__ == "__main__":
    raise SystemExit(main())
