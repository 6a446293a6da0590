"""Whether the kubelet's own CPU Manager or Memory Manager places containers on this node.

The kubelet's static CPU Manager writes every Guaranteed container's cpuset, and the Memory
Manager's Static policy its cpuset.mems; this driver writes the same files through NRI. Both
at once undo each other's work, so while either runs the driver publishes no device. The
kubelet records the policy it runs in a checkpoint under its root directory, rewritten at each
start (`cpu_manager_state`, `memory_manager_state`: JSON with a `policyName`; kubelet
cm/cpumanager/state/checkpoint.go and cm/memorymanager/state/checkpoint.go): `none` and
`None` are the policies that leave containers alone.

A file that is absent or unreadable decides nothing: the last verdict stands (none at first,
so a node whose kubelet keeps no checkpoint is not held back). Moving a kubelet off `static`
means removing its checkpoint, which the kubelet refuses to start with otherwise; in between
the file is absent and the node stays held back until the kubelet writes `none`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from dracpu.core.log import get_logger
from dracpu.core.prerequisites import CPU_MANAGER, MEMORY_MANAGER, Prerequisites

log = get_logger(__name__)

MOVE_OFF = (
    "drain the node, stop the kubelet, set {setting}: {neutral} in its configuration, remove "
    "cpu_manager_state and memory_manager_state from {root}, start the kubelet, uncordon the "
    'node (installation.md, "Moving a node off the CPU Manager")'
)


@dataclass(frozen=True)
class Manager:
    """One of the kubelet's resource managers: its prerequisite, its checkpoint file, its
    configuration setting and the policy that leaves containers alone."""

    prerequisite: str
    checkpoint: str
    setting: str
    neutral: str
    what: str
    writes: str  # what of a container's cgroup it sets


MANAGERS = (
    Manager(CPU_MANAGER, "cpu_manager_state", "cpuManagerPolicy", "none", "the CPU Manager",
            "cpuset.cpus"),
    Manager(MEMORY_MANAGER, "memory_manager_state", "memoryManagerPolicy", "None",
            "the Memory Manager", "cpuset.mems"),
)  # fmt: skip


def policy_of(text: str) -> str:
    """The `policyName` of a kubelet checkpoint; ValueError when the text is not one."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc.msg} at line {exc.lineno}") from None
    policy = document.get("policyName") if isinstance(document, dict) else None
    if not isinstance(policy, str) or not policy:
        raise ValueError("no policyName")
    return policy


class ResourceManagers:
    """Reads the kubelet's checkpoints under `root` and records a verdict per manager."""

    def __init__(self, root: Path, prerequisites: Prerequisites) -> None:
        self.root = root
        self.prerequisites = prerequisites
        self._unreadable: dict[str, str] = {}

    def allow_publishing(self) -> bool:
        """Read both checkpoints again; whether no manager of the kubelet places containers."""
        for manager in MANAGERS:
            self._check(manager)
        return not any(
            (v := self.prerequisites.get(m.prerequisite)) is not None and not v.ok for m in MANAGERS
        )

    def missing(self) -> list[str]:
        """The messages of the managers holding publishing back."""
        verdicts = [self.prerequisites.get(m.prerequisite) for m in MANAGERS]
        return [v.message for v in verdicts if v is not None and not v.ok]

    def _check(self, manager: Manager) -> None:
        path = self.root / manager.checkpoint
        try:
            policy = policy_of(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return  # no checkpoint (yet): nothing learned
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            reason = f"{exc.strerror}" if isinstance(exc, OSError) else str(exc)
            if self._unreadable.get(manager.checkpoint) != reason:
                self._unreadable[manager.checkpoint] = reason
                log.warning("the kubelet's checkpoint not read; its policy is not checked",
                            path=str(path), reason=reason)  # fmt: skip
            return
        self._unreadable.pop(manager.checkpoint, None)
        if policy == manager.neutral:
            self.prerequisites.met(
                manager.prerequisite,
                f"the kubelet runs {manager.what} with policy {policy} ({path})",
            )
            return
        steps = MOVE_OFF.format(setting=manager.setting, neutral=manager.neutral, root=self.root)
        self.prerequisites.missing(
            manager.prerequisite,
            f"the kubelet runs {manager.what} with policy {policy} ({manager.setting}, "
            f"recorded in {path}): it and this driver would both write containers' "
            f"{manager.writes}; "
            f"{steps}; no ResourceSlices are published until then",
        )
