"""One allocator per node, even when two of its processes run (a container the runtime lost
track of kept running while the kubelet started it again): the second waits for the first to
end without reading the state folder or replacing the socket, then starts from what the first
recorded."""

from __future__ import annotations

import os
import signal
import subprocess

from harness import paths
from harness.nri_bed import (
    Allocator,
    allocator_command,
    start_process,
    stop_process,
    write_topology_report,
)
from harness.services import serving_pid, wait_serving
from harness.waits import eventually

from dracpu.core.instance_lock import lock_path

WAITING = "another allocator is running; waiting for it to end before starting"


async def test_a_second_allocator_waits_and_takes_over_with_the_first_ones_claims() -> None:
    with paths.short_tmp("one-") as root:
        report = write_topology_report(root)
        socket = root / "alloc.sock"
        command = allocator_command(root, socket, report)
        first = start_process(command, root / "first.log")
        second: subprocess.Popen[bytes] | None = None
        try:
            await wait_serving(socket, first, what="the first allocator", log=root / "first.log")
            uid, cpus = await Allocator(socket, root, first).prepare(2)
            second = start_process(command, root / "second.log")
            await eventually(
                lambda: WAITING in (root / "second.log").read_text(), "the second to wait"
            )
            holder = lock_path(socket).read_text()
            assert holder.startswith(f"pid {first.pid} on "), holder
            assert await serving_pid(socket) == first.pid and second.poll() is None

            os.kill(first.pid, signal.SIGKILL)
            first.wait()
            await wait_serving(socket, second, what="the second allocator", log=root / "second.log")
            assert await serving_pid(socket) == second.pid
            claim = await Allocator(socket, root, second).claim(uid)
            assert claim.cpus == cpus.format()
        finally:
            stop_process(first)
            if second is not None:
                stop_process(second)
        log = (root / "second.log").read_text()
        assert "the other allocator ended; starting" in log and "Traceback" not in log
