"""An in-memory Kubernetes API server for development runs and tests.

It serves the part of the Kubernetes API the driver and the dev tools use (`handler`), from
objects held in memory (`store`), in a thread of a test or as a process of `dracpu dev up` and
compose (`server`); `client` is the dev tools' side of it. What it is not: no authentication
beyond an optional fixed bearer token, no admission, no schema validation beyond the fields the
driver writes, no garbage collection, no watches except of ResourceSlices, and it keeps a
`metadata.uid` given on create where the real server assigns its own.
"""

from dracpu.dev.apiserver.server import fake_apiserver
from dracpu.dev.apiserver.store import Store

__all__ = ["Store", "fake_apiserver"]
