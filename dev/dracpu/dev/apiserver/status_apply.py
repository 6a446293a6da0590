"""Server-side apply of a ResourceClaim's `status.devices`, as the API server merges that
list-map, for the API-server fake.

Entries are keyed by (driver, pool, device, shareID), each owned by the field manager that
applied it last. An apply by a manager replaces that manager's entries with the ones it names
(removing those it no longer names), leaves other managers' entries alone, and, unless forced,
refuses to take over an entry another manager owns (the API server's 409 "Apply failed with 1
conflict"). Pure: the caller reads and stores the claim and the owners.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dracpu.core.errors import ConflictError

DeviceKey = tuple[str, str, str, str]


def device_key(entry: Mapping[str, Any]) -> DeviceKey:
    """The list-map key of one status.devices entry."""
    driver, pool, device, share = (str(entry.get(k) or "") for k in _KEY_FIELDS)
    return driver, pool, device, share


_KEY_FIELDS = ("driver", "pool", "device", "shareID")


@dataclass(frozen=True)
class AppliedStatus:
    """status.devices after the apply (empty: the field is dropped) and each entry's owner."""

    devices: list[dict[str, Any]]
    owners: dict[DeviceKey, str]


def apply_devices(
    current: Sequence[Mapping[str, Any]],
    owners: Mapping[DeviceKey, str],
    manager: str,
    devices: Sequence[Mapping[str, Any]],
    *,
    force: bool,
) -> AppliedStatus:
    """Merge `manager`'s apply of `devices` into the `current` entries owned as `owners` say.
    Raises ConflictError, naming the owner, when an entry another manager owns is named without
    `force`."""
    wanted = {device_key(d): copy.deepcopy(dict(d)) for d in devices}
    taken = [k for k in wanted if owners.get(k, manager) != manager]
    if taken and not force:
        raise ConflictError(
            f'Apply failed with 1 conflict: conflict with "{owners[taken[0]]}": .status.devices'
        )
    kept = [
        dict(entry)
        for entry in current
        if device_key(entry) not in wanted and owners.get(device_key(entry)) != manager
    ]
    after = {key: owner for key, owner in owners.items() if owner != manager}
    after.update(dict.fromkeys(wanted, manager))
    return AppliedStatus(devices=kept + list(wanted.values()), owners=after)
