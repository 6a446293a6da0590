"""What the parts of the CPU plugin share: the registry of running containers, the shared pool,
what the runtime said of itself, and the lock they change under.

State changes happen under `lock`; calls back into the runtime (UpdateContainers) are made with
the lock released, because a runtime blocked in a lifecycle call to us may need its own lock to
apply our update.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from dracpu.nri_plugin.state.pacing import UpdatePacer
from dracpu.nri_plugin.state.plugin_metrics import NRIMetrics
from dracpu.nri_plugin.state.registry import Registry
from dracpu.nri_plugin.state.shared_pool import SharedPool
from dracpu.nri_plugin.transport.compat import Decision
from dracpu.nri_plugin.transport.runtime_prerequisites import RuntimePrerequisites


def _not_configured() -> Decision:
    return Decision(False, "runtime not configured yet")


@dataclass
class PluginState:
    lock: asyncio.Lock
    pool: SharedPool
    pacer: UpdatePacer  # the runtime's request timeout, and the pace of the pool pushes
    metrics: NRIMetrics
    # Replaced whole by every Synchronize: read it here each time, never keep it.
    registry: Registry = field(default_factory=Registry)
    unsolicited: Decision = field(default_factory=_not_configured)  # set at Configure
    # Containers whose CreateContainer answer the runtime did not take (id -> why): we
    # answered after its request timeout, or it dropped the connection first; kept until
    # the next Synchronize finds them.
    overdue: dict[str, str] = field(default_factory=dict)
    # What the containers show of the runtime's CDI injection; None: not judged.
    prerequisites: RuntimePrerequisites | None = None
