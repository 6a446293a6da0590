"""The facts every service and tool of the driver agrees on, defined once.

- `DRIVER_NAME`: the DRA driver name. It names the DeviceClass, the ResourceSlices' driver,
  the kubelet plugin directories, the NRI plugin and the opaque-config driver.
- The env contract of the CDI specs: a prepared claim's spec injects
  `DRA_CPUSET_<claimUID>=<cpuset>` into each container that holds the claim; the nri-plugin
  and the dev tools read it back.
"""

from __future__ import annotations

from typing import Final

DRIVER_NAME: Final = "dra.cpu"

# Entries whose name starts with this matter to the nri-plugin (the reference driver's rule);
# a claim's own entry is `<CPUSET_ENV>_<uid>`.
CPUSET_ENV: Final = "DRA_CPUSET"


def cpuset_env_name(uid: str) -> str:
    """`DRA_CPUSET_<uid>`: the env variable that carries one claim's cpuset."""
    return f"{CPUSET_ENV}_{uid}"


def cpuset_env_entry(uid: str, cpuset: str) -> str:
    """`DRA_CPUSET_<uid>=<cpuset>`, as a CDI spec's containerEdits.env lists it."""
    return f"{cpuset_env_name(uid)}={cpuset}"


def claim_uid_of_env_name(name: str) -> str | None:
    """The claim UID a `DRA_CPUSET_<uid>` name carries; None for any other name."""
    uid = name.removeprefix(f"{CPUSET_ENV}_")
    if uid == name or not uid:
        return None
    return uid
