"""`dracpu simulate`: preview the CPUs a request would get on a node, from its gatherinfo report.

It calls the allocator's own `take_cpus`, so the preview is the service's answer for the same
free CPUs. Prints the cpuset (or JSON with the NUMA nodes, sockets and uncore caches it
touches, and the memory nodes the claim's container would get); an unmet request is one
line on stderr and exit code 1, bad input exit code 2.

With `--memory` or `--hugepages` it also takes that memory from the NUMA node of the CPUs, as
a claim with the `resource.kubernetes.io/numaNode` constraint gets it, and checks it with the
allocator's own rule against what the node's memory device would publish.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from dracpu.allocator.domain.isolation import CHOICES as ISOLATION_CHOICES
from dracpu.allocator.domain.isolation import take_with_isolation
from dracpu.core.cli import ArgumentParser, run
from dracpu.core.config import MEMORY_PLACEMENTS
from dracpu.core.cpuset import CPUSet
from dracpu.core.errors import (
    CPUSetError,
    InsufficientCPUsError,
    InsufficientMemoryError,
    InvalidInputError,
)

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
    parser.add_argument(
        "--memory",
        metavar="QUANTITY",
        help="NUMA node memory to claim with the CPUs (dra.cpu/memory), e.g. 1Gi",
    )
    parser.add_argument(
        "--hugepages",
        action="append",
        default=[],
        metavar="SIZE=QUANTITY",
        help="hugepages of one page size to claim with the CPUs (dra.cpu/hugepages<SIZE>), "
        "e.g. 2Mi=64Mi; once per page size",
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


def memory_request(memory: str | None, hugepages: Sequence[str]) -> dict[str, int]:
    """The memory flags as kind -> bytes (`memory`, `hugepages-2Mi`), in the flags' order."""
    from dracpu.allocator.domain.memory_flags import memory_flags
    from dracpu.core.driver import memory_kind

    wanted = memory_flags(memory, hugepages).items()
    # Every capacity memory_flags names is a memory device's, so each has its kind.
    return {kind: amount for capacity, amount in wanted if (kind := memory_kind(capacity))}


class MemoryPlacement(NamedTuple):
    """Where a request's memory would come from: one NUMA node, the bytes of each kind and
    what the node's memory device publishes of it."""

    node: int
    amounts: tuple[tuple[str, int, int], ...]  # kind, bytes wanted, bytes published

    def to_json(self) -> dict[str, Any]:
        return {
            "numaNode": self.node,
            "amounts": [
                {"kind": kind, "bytes": wanted, "published": published}
                for kind, wanted, published in self.amounts
            ],
        }

    def describe(self) -> str:
        from dracpu.core.memory import binary_quantity

        amounts = ", ".join(
            f"{kind} {binary_quantity(wanted)} of {binary_quantity(published)}"
            for kind, wanted, published in self.amounts
        )
        return f"memory from NUMA node {self.node}: {amounts} published"


SIMULATED = "simulated"


def place_memory(machine: Machine, cpus: CPUSet, wanted: dict[str, int]) -> MemoryPlacement:
    """Take `wanted` from the NUMA node of `cpus` (memory of one node goes with CPUs of that
    node, as the numaNode constraint asks) and check it with the allocator's prepare rule
    against the node's memory device, built as the allocator builds it from the report."""
    from dracpu.allocator.claims.memory import capacity, check_free
    from dracpu.allocator.claims.model import MemoryAmount
    from dracpu.allocator.claims.state import NodeState
    from dracpu.allocator.domain.devices import DeviceModel, DeviceOptions, memory_devices
    from dracpu.core.driver import memory_device_name

    if not machine.memory:
        raise InvalidInputError(
            "the topology lists no NUMA node memory: a gatherinfo report of a release with "
            "memory devices lists each node's memory"
        )
    nodes = machine.numa_nodes_of(cpus)
    if len(nodes) != 1:
        raise InsufficientCPUsError(
            f"the CPUs {cpus.format()} lie on NUMA nodes {nodes.format()}: memory comes from "
            "the one NUMA node of the claim's CPUs; ask for fewer CPUs or give --available"
        )
    node = nodes.first()
    devices = tuple(memory_devices(machine))
    if not any(d.name == memory_device_name(node) for d in devices):
        raise InvalidInputError(
            f"the topology has no memory of NUMA node {node} (none, or unreadable: see the "
            "report's memory problems)"
        )
    state = NodeState(machine=machine, devices=DeviceModel(DeviceOptions(), devices))
    amounts = tuple(MemoryAmount(node, kind, size) for kind, size in sorted(wanted.items()))
    try:
        check_free(state, SIMULATED, amounts)
    except InsufficientMemoryError as exc:
        raise InsufficientMemoryError(str(exc).removeprefix(f"claim {SIMULATED}: ")) from None
    return MemoryPlacement(
        node, tuple((a.kind, a.bytes, capacity(state, node, a.kind)) for a in amounts)
    )


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
    wanted = memory_request(args.memory, args.hugepages)
    cpus = take_with_isolation(machine, available - reserved, args.count, policy, args.isolated)
    memory = place_memory(machine, cpus, wanted) if wanted else None
    if args.json:
        shown = placement(machine, cpus, args.memory_placement)
        if memory is not None:
            shown["memoryNodes"] = CPUSet([memory.node]).format()
            shown["memory"] = memory.to_json()
        print(json.dumps(shown))
    else:
        print(cpus.format())
        if memory is not None:
            print(memory.describe())
        elif args.memory_placement == "local":
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
