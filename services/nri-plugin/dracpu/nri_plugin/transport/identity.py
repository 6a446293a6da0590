"""How the plugin presents itself to the runtime: where the runtime listens by default and the
runtime's rules for a plugin's name and index (containerd/nri pkg/api). Free of protobuf, so the
command line can check its flags without loading the NRI messages."""

from __future__ import annotations

import re
from typing import Final

DEFAULT_NRI_SOCKET: Final = "/var/run/nri/nri.sock"

_NAME = re.compile(r"^[a-zA-Z0-9_.+-]+$")
_INDEX = re.compile(r"^[0-9]{2}$")


def valid_plugin_name(name: str) -> bool:
    """Runtime check (api.CheckPluginName): non-empty, letters, digits and `_.+-`."""
    return bool(_NAME.match(name))


def valid_plugin_index(index: str) -> bool:
    """Runtime check (api.CheckPluginIndex): exactly two ASCII digits."""
    return bool(_INDEX.match(index))
