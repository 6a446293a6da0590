"""The nri-plugin's prerequisite verdicts reach the dra-plugin (which writes them as Events):
pushed on the nri-plugin's watch as they change, or, from an nri-plugin of an older release
without it, asked for periodically."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import pytest
from harness import paths
from harness.services import served_in_process
from harness.waits import eventually

from dracpu.core.prerequisites import Prerequisite, Prerequisites
from dracpu.dra_plugin.common.nri_status import follow_nri_prerequisites
from dracpu.pb.nri_plugin.v1 import nri_plugin_pb2, nri_plugin_pb2_grpc

pytestmark = pytest.mark.timeout(60)


class OlderView(nri_plugin_pb2_grpc.NRIPluginViewServicer):  # type: ignore[misc]
    """An nri-plugin view of an older release: GetStatus, no WatchPrerequisites."""

    def __init__(self, verdicts: Prerequisites) -> None:
        self.verdicts = verdicts
        self.asked = 0

    async def GetStatus(
        self, request: nri_plugin_pb2.GetStatusRequest, context: grpc.aio.ServicerContext
    ) -> nri_plugin_pb2.PluginStatus:
        self.asked += 1
        return nri_plugin_pb2.PluginStatus(prerequisites=self.verdicts.protos())


class View(OlderView):
    """The nri-plugin view of this release: the verdicts pushed as they change."""

    async def WatchPrerequisites(
        self,
        request: nri_plugin_pb2.WatchPrerequisitesRequest,
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[nri_plugin_pb2.PrerequisiteList]:
        while True:
            changed = self.verdicts.changes.next()
            yield nri_plugin_pb2.PrerequisiteList(prerequisites=self.verdicts.protos())
            await changed.wait()


@pytest.fixture
def socket() -> Iterator[Path]:
    with paths.short_tmp("nriv") as path:
        yield path / "n.sock"


@contextlib.asynccontextmanager
async def following(
    socket: Path, view: OlderView, poll_interval: float = 10.0
) -> AsyncIterator[list[Prerequisite]]:
    """The view served on `socket`, its verdicts followed; what was reported, in order."""
    reported: list[Prerequisite] = []
    async with served_in_process(
        socket, lambda server: nri_plugin_pb2_grpc.add_NRIPluginViewServicer_to_server(view, server)
    ):
        task = asyncio.create_task(
            follow_nri_prerequisites(socket, reported.append, poll_interval=poll_interval)
        )
        try:
            yield reported
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def said(reported: list[Prerequisite], name: str, ok: bool) -> bool:
    return any(v.name == name and v.ok is ok for v in reported)


async def test_a_changed_verdict_is_pushed_without_asking_for_the_status(socket: Path) -> None:
    verdicts = Prerequisites()
    verdicts.missing("nri", "NRI is not enabled in the runtime")
    view = View(verdicts)
    async with following(socket, view) as reported:
        await eventually(lambda: said(reported, "nri", False), "the missing NRI reported")
        verdicts.met("nri", "the runtime speaks NRI")
        await eventually(lambda: said(reported, "nri", True), "NRI's return reported")
    assert view.asked == 0


async def test_an_older_nri_plugin_is_asked_for_its_status_periodically(socket: Path) -> None:
    verdicts = Prerequisites()
    verdicts.missing("cdi", "CDI is not enabled in the runtime")
    view = OlderView(verdicts)
    async with following(socket, view, poll_interval=0.1) as reported:
        await eventually(lambda: said(reported, "cdi", False), "the missing CDI reported")
        verdicts.met("cdi", "CDI devices reach containers")
        await eventually(lambda: said(reported, "cdi", True), "CDI's return reported")
    assert view.asked >= 2
