"""Where the allocator gets the CPU inventory: the topology service (default), or a
gatherinfo report / JSON `cpus` document for development and tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

from dracpu.core.clients.topology import TopologyClient
from dracpu.core.documents import read_yaml_file
from dracpu.core.errors import DracpuError, UnavailableError
from dracpu.core.log import get_logger
from dracpu.core.machine import Machine
from dracpu.core.retry import Backoff

log = get_logger(__name__)


def load_file(path: str) -> Machine:
    document = read_yaml_file(path, "topology file")
    return Machine.from_report(document, f"topology file {path}")


async def fetch(socket: str, timeout: float = 5.0, *, rediscover: bool = False) -> Machine:
    """The inventory; with `rediscover`, after the topology service re-read sysfs (CPUs may
    have gone offline or come back since it started)."""
    async with TopologyClient(socket, timeout=timeout, wait_for_ready=False) as client:
        inventory = await client.inventory(rediscover=rediscover)
    if not inventory.cpus:
        raise UnavailableError(f"topology service at {socket} reports no CPUs")
    return Machine.from_proto(inventory)


async def watch(socket: str) -> AsyncIterator[Machine | str]:
    """The inventory now and at every change the topology service sees, or, while it cannot
    read sysfs, why; `UnimplementedError` from a topology service of an older release."""
    async with TopologyClient(socket, wait_for_ready=False) as client:
        async for inventory in client.watch_inventory():
            if inventory.unreadable:
                yield inventory.unreadable
                continue
            if not inventory.cpus:
                raise UnavailableError(f"topology service at {socket} reports no CPUs")
            yield Machine.from_proto(inventory)


async def wait_for_inventory(socket: str, max_delay: float = 5.0) -> Machine:
    """Ask until the topology service answers; it may start after us."""
    backoff = Backoff(initial=0.1, maximum=max_delay)
    while True:
        try:
            return await fetch(socket)
        except DracpuError as exc:
            # Say it once loudly, then only at debug level.
            if backoff.attempts == 0:
                log.warning(
                    "topology service not answering yet; retrying", socket=socket, error=str(exc)
                )
            else:
                log.info(
                    4,
                    "topology service still not answering",
                    socket=socket,
                    attempt=backoff.attempts + 1,
                    error=str(exc),
                )
        await backoff.wait()
