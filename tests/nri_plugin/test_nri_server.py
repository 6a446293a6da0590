"""The `dracpu-nri-plugin` process: its command line, health and view."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from harness.nri_bed import Allocator, start_process, stop_process
from harness.waits import eventually

from dracpu.core.rpc import call, channel, check_health
from dracpu.dev.runtime_sim import RuntimeSim
from dracpu.pb.common.v1 import info_pb2, info_pb2_grpc
from dracpu.pb.nri_plugin.v1 import nri_plugin_pb2, nri_plugin_pb2_grpc

PROGRAM = str(Path(sys.executable).parent / "dracpu-nri-plugin")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            ["--unsolicited-updates", "maybe"], "must be auto, on or off", id="bad-unsolicited"
        ),
        pytest.param(["--nri-plugin-index", "7"], "is not two digits", id="bad-index"),
        pytest.param(["--nri-socket", "/" + "x" * 120], "the limit is 107", id="long-socket"),
        pytest.param(["-v", "99"], "verbosity must be 0-10", id="bad-verbosity"),
    ],
)
def test_bad_flags_give_one_line_and_exit_2(args: list[str], message: str) -> None:
    result = subprocess.run(
        [PROGRAM, "--socket", "/tmp/unused-nri-view.sock", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "Traceback" not in result.stderr


async def health_becomes(socket: Path, expected: str, timeout: float = 20.0) -> None:
    async def health_is() -> bool:
        seen = await check_health(socket, timeout=1.0)  # an unreachable one: not yet
        assert seen == expected, f"health {seen}"
        return True

    await eventually(health_is, f"health of {socket} to be {expected}", timeout=timeout)


async def test_health_follows_the_runtime_connection(allocator: Allocator, short_tmp: Path) -> None:
    view = short_tmp / "view.sock"
    nri_socket = short_tmp / "nri.sock"
    log = short_tmp / "plugin.log"
    process = start_process(
        [
            PROGRAM,
            "--socket",
            str(view),
            "--allocator-socket",
            str(allocator.socket),
            "--nri-socket",
            str(nri_socket),
        ],
        log,
    )
    try:
        # No runtime yet: the view answers, health says NOT_SERVING.
        await health_becomes(view, "NOT_SERVING")
        async with channel(view) as chan:
            version = await call(
                info_pb2_grpc.InfoStub(chan).GetVersion(info_pb2.GetVersionRequest()), "version"
            )

            async def refused() -> nri_plugin_pb2.PluginStatus | None:
                """The status once the first connection attempt has failed (health is
                NOT_SERVING from the start, before any attempt)."""
                status = await call(
                    nri_plugin_pb2_grpc.NRIPluginViewStub(chan).GetStatus(
                        nri_plugin_pb2.GetStatusRequest()
                    ),
                    "status",
                )
                return status if status.last_error else None

            status = await eventually(refused, "the nri-plugin's first connection attempt")
        assert version.api_version == "dracpu.nri_plugin.v1"
        assert not status.connected and "cannot connect" in status.last_error
        runtime = RuntimeSim(str(nri_socket))
        await runtime.start()
        try:
            await runtime.wait_plugin(timeout=20)
            await health_becomes(view, "SERVING")
        finally:
            await runtime.stop()
        await health_becomes(view, "NOT_SERVING")
    finally:
        stop_process(process)
    assert "Traceback" not in log.read_text()
