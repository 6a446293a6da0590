"""What the api's routes share: the backends, the driver configuration, the api's own metrics
and the claim-list caches, kept on `app.state`, and the dependency that hands them to a route."""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, Request

from dracpu.api import models, translate
from dracpu.api.backends import Backends
from dracpu.api.coalesce import Coalescer
from dracpu.api.metrics import ApiMetrics
from dracpu.api.reply_cache import ReplyCache
from dracpu.core import __version__
from dracpu.core.config import DriverConfig

API_VERSION = "dracpu.api.v1"


@dataclass
class ApiState:
    """One application's state: built once by create_app, read by every request."""

    backends: Backends
    config: DriverConfig
    node_name: str
    metrics: ApiMetrics = field(default_factory=ApiMetrics)
    claim_lists: ReplyCache = field(default_factory=ReplyCache)
    claim_reads: Coalescer[bytes] = field(default_factory=Coalescer)
    started: float = field(default_factory=time.time)

    def own_version(self) -> models.ServiceVersion:
        """The api's own entry in the version lists."""
        return models.ServiceVersion(
            service="api",
            version=__version__,
            api_version=API_VERSION,
            python_version=sys.version.split()[0],
            started_at=translate.timestamp(self.started),
            pid=os.getpid(),
        )


async def api_state(request: Request) -> ApiState:
    """The state of the application answering the request (async: no thread per request)."""
    state: ApiState = request.app.state.api
    return state


StateDep = Annotated[ApiState, Depends(api_state)]
