"""One nri-plugin per node, even when two of its processes run: a container the runtime lost
track of (its state `unknown` after a containerd restart on a loaded node) kept running while the
kubelet started the nri-plugin again, the second process registered with the runtime under the
same name, and the runtime then refused every container on the node ("plugins "00-dra.cpu" and
"00-dra.cpu" both tried to set CPUSetCPUs"), the driver's own included. A second process now
waits for the first to end, touching neither the runtime nor the socket the first serves."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from harness.nri_bed import Allocator, start_process, stop_process
from harness.services import serving_pid, wait_serving
from harness.waits import eventually

from dracpu.core.cpuset import CPUSet
from dracpu.core.driver import DRIVER_NAME
from dracpu.dev.runtime_sim import RuntimeSim

PROGRAM = str(Path(sys.executable).parent / "dracpu-nri-plugin")
WAITING = "another nri-plugin is running; waiting for it to end before starting"


def plugin(root: Path, allocator: Allocator, name: str) -> subprocess.Popen[bytes]:
    sockets = ["--socket", str(root / "nri-plugin.sock"), "--nri-socket", str(root / "nri.sock")]
    command = [PROGRAM, *sockets, "--allocator-socket", str(allocator.socket), "-v", "2"]
    return start_process(command, root / f"{name}.log")


async def test_a_second_nri_plugin_waits_and_takes_over_when_the_first_dies(
    allocator: Allocator, short_tmp: Path
) -> None:
    runtime = RuntimeSim(str(short_tmp / "nri.sock"))
    await runtime.start()
    first = plugin(short_tmp, allocator, "first")
    second: subprocess.Popen[bytes] | None = None
    try:
        await wait_serving(short_tmp / "nri-plugin.sock", first, what="the first nri-plugin")
        await runtime.wait_plugin(timeout=20)
        second = plugin(short_tmp, allocator, "second")
        await eventually(
            lambda: WAITING in (short_tmp / "second.log").read_text(), "the second to wait"
        )
        # One registration, one answer per container; the socket still the first's.
        assert [p.name for p in runtime.plugins] == [DRIVER_NAME]
        pod = runtime.add_pod("web")
        shared = await runtime.create_container(pod, "nginx")
        assert CPUSet.parse(runtime.cpus(shared))
        assert await serving_pid(short_tmp / "nri-plugin.sock") == first.pid
        assert second.poll() is None

        os.kill(first.pid, signal.SIGKILL)  # a crash: nothing released by the process itself
        first.wait()
        await wait_serving(short_tmp / "nri-plugin.sock", second, what="the second nri-plugin")
        await eventually(
            lambda: [p.name for p in runtime.plugins if p.admitted] == [DRIVER_NAME],
            "the second registered",
            timeout=20,
        )
        assert await serving_pid(short_tmp / "nri-plugin.sock") == second.pid
        assert CPUSet.parse(runtime.cpus(await runtime.create_container(pod, "next")))
    finally:
        stop_process(first)
        if second is not None:
            stop_process(second)
        await runtime.stop()
    log = (short_tmp / "second.log").read_text()
    assert "the other nri-plugin ended; starting" in log and "Traceback" not in log
