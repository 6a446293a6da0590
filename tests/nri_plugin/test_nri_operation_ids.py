"""Each NRI event is one operation: the plugin's lines for a CreateContainer and the allocator's
lines for the AttachContainer it made carry the same `opID`; two events, two IDs.

The bed of tests/harness/nri_bed.py (the runtime stand-in, the plugin in-process), both the
plugin and the real allocator logging at `-v 2` (where each logs the container it pinned or
attached), their logs read as klog text.
"""

from __future__ import annotations

import io
import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from harness.nri_bed import (
    START_DEADLINE,
    Allocator,
    Bed,
    allocator_command,
    claim_env,
    start_process,
    stop_process,
    write_topology_report,
)
from harness.services import wait_serving
from logformats import KlogLine, klog_lines

from dracpu.core import log
from dracpu.dev.runtime_sim import CreateContainerError


@pytest.fixture
async def allocator(short_tmp: Path) -> AsyncIterator[Allocator]:
    """The bed's allocator, logging its decisions (-v 2)."""
    report = write_topology_report(short_tmp)
    socket = short_tmp / "alloc.sock"
    log = short_tmp / "allocator.log"
    command = [*allocator_command(short_tmp, socket, report), "-v", "2"]
    running = Allocator(socket, short_tmp, start_process(command, log))
    try:
        await wait_serving(
            socket, running.process, what="the allocator", log=log, timeout=START_DEADLINE
        )
        yield running
    finally:
        stop_process(running.process)


@pytest.fixture
def plugin_log() -> Iterator[io.StringIO]:
    """The plugin's log lines at -v 2; logging is put back as it was afterwards."""
    root = logging.getLogger("dracpu")
    handlers, verbosity = list(root.handlers), log.verbosity()
    stream = io.StringIO()
    log.setup(2, "nri-plugin-test", stream)
    yield stream
    log.setup(verbosity, "dracpu", io.StringIO())
    root.handlers[:] = handlers


def container_lines(text: str, message: str, container: str) -> list[KlogLine]:
    return [
        line
        for line in klog_lines(text)
        if line.msg == message and line.values.get("container") == container
    ]


async def test_a_created_container_is_followed_into_the_allocator_by_its_op_id(
    bed: Bed, plugin_log: io.StringIO, short_tmp: Path
) -> None:
    uid, cpus = await bed.allocator.prepare(2)
    pod = bed.runtime.add_pod("db")
    pinned = await bed.runtime.create_container(pod, "postgres", claim_env((uid, cpus)))
    with pytest.raises(CreateContainerError, match="belongs to"):
        await bed.runtime.create_container(pod, "sidecar", claim_env((uid, cpus)))

    (pinned_line,) = container_lines(plugin_log.getvalue(), "pinned container", pinned)
    op_id = pinned_line.values["opID"]
    allocator_log = (short_tmp / "allocator.log").read_text()
    (attached,) = container_lines(allocator_log, "container attached", pinned)
    assert attached.values["opID"] == op_id

    # The second container is refused (the claim has its owner): its own operation's line.
    (refused,) = [
        line for line in klog_lines(plugin_log.getvalue()) if line.msg == "refused container"
    ]
    assert refused.values["container"] == "sidecar"
    assert refused.values["opID"] not in ("", op_id)
