"""The `DRA_CPUSET_<claimUID>=<cpuset>` entries the allocator's CDI specs put in a container.

Rules (as the reference driver's parseDRAEnvToClaimAllocations): only entries starting with
`DRA_CPUSET` matter; one without `=` is malformed; a key that is not `DRA_CPUSET_<uid>` is
ignored; a value that is not a non-empty Linux CPU list is malformed.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from dracpu.core.cpuset import CPUSet
from dracpu.core.errors import CPUSetError, InvalidInputError

PREFIX: Final = "DRA_CPUSET"


def parse_claim_env(env: Iterable[str]) -> dict[str, CPUSet]:
    """Claim UID -> cpuset for every claim entry; InvalidInputError on a malformed one."""
    claims: dict[str, CPUSet] = {}
    for entry in env:
        if not entry.startswith(PREFIX):
            continue
        key, sep, value = entry.partition("=")
        if not sep:
            raise InvalidInputError(f"malformed DRA env entry {entry!r}: no '='")
        uid = key.removeprefix(PREFIX + "_")
        if uid == key or not uid:
            continue
        try:
            cpus = CPUSet.parse(value)
        except CPUSetError as exc:
            raise InvalidInputError(f"malformed DRA env entry {entry!r}: {exc}") from None
        if not cpus:
            raise InvalidInputError(f"malformed DRA env entry {entry!r}: empty cpuset")
        claims[uid] = cpus
    return claims
