"""How long the api waits: for a service's answer and for a client's request headers. The
defaults of its command line, kept free of gRPC and uvicorn so parsing arguments stays light."""

from __future__ import annotations

# Local unix-socket calls answer in milliseconds; a second means the peer is stuck.
DEFAULT_TIMEOUT = 1.0
# A client that has not sent its request headers by then is disconnected.
HEADER_TIMEOUT = 10.0
