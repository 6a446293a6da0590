#!/usr/bin/env python3
"""runc as the one-node cluster's CRI-O runs it (tools/cluster.sh, DRACPU_RUNTIME=crio).

    crio-runc.py RUNC ARGS...

Before `RUNC ARGS...` takes over this process, the bundle's config.json (`--bundle`/`-b`) is
made fit for this machine the way containerd's CRI settings make it there, which CRI-O has no
setting for:

- a negative `oomScoreAdj` is raised to the caller's own (conmon's, which is CRI-O's): root
  without CAP_SYS_RESOURCE cannot lower it, and the kubelet asks -997 for a critical pod
  (containerd: restrict_oom_score_adj);
- `hugepageLimits` are dropped when no hugetlb cgroup hierarchy is mounted: the kernel lists
  the controller, so the kubelet and CRI-O ask for limits, and runc fails the container for
  want of the cgroup (containerd: tolerate_missing_hugetlb_controller, on by default).
"""

from __future__ import annotations

import itertools
import json
import os
import sys
from pathlib import Path
from typing import Any


def hugetlb_mounted() -> bool:
    """A hugetlb hierarchy runc can use: cgroup v1's, or the unified one of a cgroup v2 host
    (the empty cgroup2 of a hybrid host's `unified/` holds no controller)."""
    controllers = Path("/sys/fs/cgroup/cgroup.controllers")
    if controllers.exists():
        return "hugetlb" in controllers.read_text().split()
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        _, _, tail = line.partition(" - ")
        fstype, _, rest = tail.partition(" ")
        options = rest.partition(" ")[2]
        if fstype == "cgroup" and "hugetlb" in options.split(","):
            return True
    return False


def own_oom_score_adj() -> int:
    try:
        return int(Path(f"/proc/{os.getppid()}/oom_score_adj").read_text())
    except (OSError, ValueError):
        return 0


def fit(config: dict[str, Any]) -> bool:
    """Make the changes above; True when something changed."""
    changed = False
    process = config.get("process") or {}
    floor = own_oom_score_adj()
    if isinstance(process.get("oomScoreAdj"), int) and process["oomScoreAdj"] < floor:
        process["oomScoreAdj"] = floor
        changed = True
    resources = (config.get("linux") or {}).get("resources") or {}
    if resources.get("hugepageLimits") and not hugetlb_mounted():
        del resources["hugepageLimits"]
        changed = True
    return changed


def bundle_of(args: list[str]) -> Path | None:
    for flag, value in itertools.pairwise(args):
        if flag in ("--bundle", "-b"):
            return Path(value)
    for arg in args:
        if arg.startswith("--bundle="):
            return Path(arg.split("=", 1)[1])
    return None


def main(argv: list[str]) -> None:
    runc, args = argv[0], argv[1:]
    bundle = bundle_of(args)
    config_file = bundle / "config.json" if bundle is not None else None
    if config_file is not None and config_file.is_file():
        config = json.loads(config_file.read_text())
        if fit(config):
            config_file.write_text(json.dumps(config))
    os.execv(runc, [runc, *args])


if __name__ == "__main__":
    main(sys.argv[1:])
