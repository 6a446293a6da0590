"""NRI event numbers, subscription masks and plugin identity rules (containerd/nri pkg/api)."""

from __future__ import annotations

import re
from typing import Final

from dracpu.pb.nri import api_pb2


def event_bit(event: int) -> int:
    """Subscription bit of an event: 1 << (event - 1)."""
    return 1 << (event - 1)


# Events every NRI version knows (1-11): a bit outside the runtime's valid set gets the plugin
# rejected at Configure, and NRI < v0.10 knows nothing above REMOVE_CONTAINER.
VALID_MASK_BEFORE_V0_10: Final = (1 << 11) - 1  # 0x7FF
VALID_MASK_FROM_V0_10: Final = (1 << 14) - 1  # 0x3FFF

# What the CPU plugin needs: pin at create, forget at stop and remove (0x608), and learn that
# a container runs (post-start, 0x040) so the view shows the runtime's state. Every bit is
# below 0x7FF, the valid set of every NRI version: older runtimes accept the mask as well.
# Post-start rather than start: it arrives once runc has started the process, and the runtime
# ignores its errors, so it cannot fail a container's start.
SUBSCRIBED_EVENTS: Final = (
    event_bit(api_pb2.CREATE_CONTAINER)
    | event_bit(api_pb2.POST_START_CONTAINER)
    | event_bit(api_pb2.STOP_CONTAINER)
    | event_bit(api_pb2.REMOVE_CONTAINER)
)

_NAME = re.compile(r"^[a-zA-Z0-9_.+-]+$")
_INDEX = re.compile(r"^[0-9]{2}$")


def valid_plugin_name(name: str) -> bool:
    """Runtime check (api.CheckPluginName): non-empty, letters, digits and `_.+-`."""
    return bool(_NAME.match(name))


def valid_plugin_index(index: str) -> bool:
    """Runtime check (api.CheckPluginIndex): exactly two ASCII digits."""
    return bool(_INDEX.match(index))
