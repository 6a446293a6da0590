"""A gate on a container's OCI create, to hold a real runtime's container creation in flight.

A CDI device (kind `dracpu-test.example/gate`) whose spec gives the container a `createRuntime`
hook: runc runs it on the host while it creates the container, and the hook waits until the
gate opens. Where the runtime runs the OCI create inside CRI CreateContainer (CRI-O), the
creation is then in flight for as long as the gate is shut: its NRI CreateContainer has been
sent, and it is not in the runtime's container list yet. containerd runs the OCI create at
StartContainer, so there the gate holds the start instead. Every hook records that it entered;
a shut gate opens by itself after `limit` seconds, so nothing hangs past a failed test.
"""

from __future__ import annotations

import json
from pathlib import Path

KIND = "dracpu-test.example/gate"

_HOOK = """#!/bin/sh
# createRuntime hook: the OCI state arrives on stdin; record the entry, wait for the gate.
cat >/dev/null
touch "{dir}/entered-$$"
waited=0
while [ ! -e "{dir}/open" ] && [ "$waited" -lt {ticks} ]; do
    sleep 0.1
    waited=$((waited + 1))
done
exit 0
"""


class CreationGate:
    """One gate: its CDI device id (`device`) given to a container holds that container's
    OCI create until `open()`."""

    def __init__(self, cdi_dir: Path, work_dir: Path, name: str = "hold", limit: float = 300.0):
        self.dir = Path(work_dir).absolute()
        self.dir.mkdir(parents=True, exist_ok=True)
        self.device = f"{KIND}={name}"
        self.spec_file = Path(cdi_dir) / f"dracpu-test-gate-{name}.json"
        hook = self.dir / "hold.sh"
        hook.write_text(_HOOK.format(dir=self.dir, ticks=int(limit * 10)))
        hook.chmod(0o755)
        spec = {
            "cdiVersion": "0.5.0",
            "kind": KIND,
            "devices": [
                {
                    "name": name,
                    "containerEdits": {
                        "env": ["DRACPU_TEST_GATE=1"],
                        "hooks": [
                            {"hookName": "createRuntime", "path": str(hook), "args": ["hold.sh"]}
                        ],
                    },
                }
            ],
        }
        self.spec_file.write_text(json.dumps(spec))

    def entered(self) -> int:
        """How many OCI creates reached the gate."""
        return len(list(self.dir.glob("entered-*")))

    def open(self) -> None:
        (self.dir / "open").touch()

    def remove(self) -> None:
        """Open the gate and take its CDI spec away."""
        self.open()
        self.spec_file.unlink(missing_ok=True)
