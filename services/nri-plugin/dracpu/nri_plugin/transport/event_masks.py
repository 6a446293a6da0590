"""NRI event numbers, subscription masks and plugin identity rules (containerd/nri pkg/api)."""

from __future__ import annotations

from typing import Final

from dracpu.nri_plugin.transport.identity import valid_plugin_index as valid_plugin_index
from dracpu.nri_plugin.transport.identity import valid_plugin_name as valid_plugin_name
from dracpu.pb.nri import api_pb2


def event_bit(event: int) -> int:
    """Subscription bit of an event: 1 << (event - 1)."""
    return 1 << (event - 1)


# Events every NRI version knows (1-11): a bit outside the runtime's valid set gets the plugin
# rejected at Configure, and NRI < v0.10 knows nothing above REMOVE_CONTAINER.
VALID_MASK_BEFORE_V0_10: Final = (1 << 11) - 1  # 0x7FF
VALID_MASK_FROM_V0_10: Final = (1 << 14) - 1  # 0x3FFF

# What the CPU plugin needs: pin at create, forget at stop and remove (0x608), learn that a
# container runs (post-start, 0x040) so the view shows the runtime's state, and keep each
# container on its cpuset when another party updates it (update, 0x080). Every bit is below
# 0x7FF, the valid set of every NRI version: older runtimes accept the mask as well.
# Post-start rather than start: it arrives once runc has started the process, and the runtime
# ignores its errors, so it cannot fail a container's start.
SUBSCRIBED_EVENTS: Final = (
    event_bit(api_pb2.CREATE_CONTAINER)
    | event_bit(api_pb2.POST_START_CONTAINER)
    | event_bit(api_pb2.UPDATE_CONTAINER)
    | event_bit(api_pb2.STOP_CONTAINER)
    | event_bit(api_pb2.REMOVE_CONTAINER)
)
