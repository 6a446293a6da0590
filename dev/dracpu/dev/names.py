"""The names the dev tools accept for what they create in the API server."""

from __future__ import annotations

import re

from dracpu.core.errors import InvalidInputError

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def check_name(kind: str, name: str) -> str:
    if not _DNS_LABEL.match(name):
        raise InvalidInputError(
            f"{kind} {name!r} is not a DNS label (lowercase letters, digits and '-', "
            "at most 63, starting and ending with a letter or digit)"
        )
    return name
