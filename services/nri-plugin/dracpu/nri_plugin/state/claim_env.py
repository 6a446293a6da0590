"""The `DRA_CPUSET_<claimUID>=<cpuset>` entries the allocator's CDI specs put in a container.

Rules (as the reference driver's parseDRAEnvToClaimAllocations): only entries starting with
`DRA_CPUSET` matter; one without `=` is malformed; a key that is not `DRA_CPUSET_<uid>` is
ignored; a value that is not a non-empty Linux CPU list is malformed. Two entries for one
claim are malformed too (the pod spec can add one next to the CDI spec's: no silent winner).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from dracpu.core.cpuset import CPUSet
from dracpu.core.driver import CPUSET_ENV, claim_uid_of_env_name
from dracpu.core.errors import InvalidInputError
from dracpu.core.names import check_uid, echo

MAX_CLAIMS: Final = 128


def parse_claim_env(env: Iterable[str]) -> dict[str, CPUSet]:
    """Claim UID -> cpuset for every claim entry; InvalidInputError on a malformed one."""
    claims: dict[str, CPUSet] = {}
    for entry in env:
        if not entry.startswith(CPUSET_ENV):
            continue
        key, sep, value = entry.partition("=")
        if not sep:
            raise InvalidInputError(f"malformed DRA env entry {echo(entry)}: no '='")
        uid = claim_uid_of_env_name(key)
        if uid is None:
            continue
        try:
            check_uid(uid)
            cpus = CPUSet.parse(value)
        except InvalidInputError as exc:
            raise InvalidInputError(f"malformed DRA env entry {echo(entry)}: {exc}") from None
        if not cpus:
            raise InvalidInputError(f"malformed DRA env entry {echo(entry)}: empty cpuset")
        if uid in claims:
            raise InvalidInputError(f"DRA env names claim {uid} twice")
        if len(claims) >= MAX_CLAIMS:
            raise InvalidInputError(f"DRA env names more than {MAX_CLAIMS} claims")
        claims[uid] = cpus
    return claims
