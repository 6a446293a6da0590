"""Kubelet plugin-watcher registration: the PluginInfo the plugin offers and the outcome the
kubelet reported (PluginRegistration), and the watchdog that says when it has not come.

The kubelet finds our socket in our own directory under its plugins_registry dir, asks GetInfo,
and tells us the outcome through NotifyRegistrationStatus (the servicer, Registration in
dracpu.dra_plugin.servicer, answers both from here). We record that outcome for the status view
and the registration watchdog; a plugin the kubelet has not registered keeps serving.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dracpu.core.log import get_logger
from dracpu.core.tasks import within
from dracpu.dra_plugin.common.intervals import REGISTRATION_TIMEOUT
from dracpu.pb.kubelet.pluginregistration.v1 import api_pb2

log = get_logger(__name__)

PLUGIN_TYPE = "DRAPlugin"


@dataclass
class RegistrationState:
    registered: bool = False
    error: str = ""  # the kubelet's last rejection reason
    notified: bool = False  # the kubelet called NotifyRegistrationStatus at least once
    info_requests: int = 0
    changed_at: float = 0.0


class PluginRegistration:
    """The plugin's registration with the kubelet: what it offers, what the kubelet said."""

    def __init__(self, driver: str, endpoint: Path, versions: Sequence[str]) -> None:
        self.info = api_pb2.PluginInfo(
            type=PLUGIN_TYPE, name=driver, endpoint=str(endpoint), supported_versions=versions
        )
        self.state = RegistrationState()
        self.registered_event = asyncio.Event()
        self.changed = asyncio.Event()  # replaced after every notification

    def info_requested(self) -> api_pb2.PluginInfo:
        """The kubelet asked for the plugin's info (GetInfo): count it, hand the info out."""
        self.state.info_requests += 1
        log.info(
            4, "kubelet asked for plugin info", versions=",".join(self.info.supported_versions)
        )
        return self.info

    def notified(self, registered: bool, error: str) -> None:
        """The kubelet reported the outcome (NotifyRegistrationStatus): record it."""
        state = self.state
        state.notified = True
        state.changed_at = time.time()
        state.registered = registered
        self.changed.set()
        self.changed = asyncio.Event()
        if registered:
            state.error = ""
            self.registered_event.set()
            log.info(2, "kubelet registered the plugin", driver=self.info.name)
            return
        state.error = error
        self.registered_event.clear()
        log.warning("kubelet rejected the plugin", driver=self.info.name, reason=error)

    async def watchdog(self, registrar_dir: Path, timeout: float = REGISTRATION_TIMEOUT) -> None:
        """Say clearly when the kubelet has not registered us in time; keep serving anyway."""
        try:
            await within(self.registered_event.wait(), timeout)
            return
        except TimeoutError:
            pass
        state = self.state
        if state.error:
            detail = f"the kubelet's last rejection: {state.error}"
        elif state.notified or state.info_requests:
            detail = "the kubelet asked for plugin info but reported no registration outcome"
        else:
            detail = "the kubelet never contacted the plugin; check that it watches this directory"
        log.warning(
            f"kubelet has not registered the plugin within {timeout:g}s; still serving",
            registrar_dir=str(registrar_dir),
            detail=detail,
        )
        await self.registered_event.wait()
        log.info(2, "kubelet registered the plugin after the watchdog fired")
