"""CPU hotplug on a sysfs fixture, the way the kernel shows it: an offline CPU keeps its
`cpuN` folder with `online` 0 and loses its `topology` and `cache`, and the `online` list
shrinks. The topology service reads exactly that."""

from __future__ import annotations

import shutil
from pathlib import Path

CPU = "devices/system/cpu"


class Hotplug:
    """Takes CPUs of a fixture offline, and brings them back."""

    def __init__(self, sysfs: Path) -> None:
        self.cpu_dir = sysfs / CPU
        self.saved = sysfs.parent / "offline-cpus"
        self.online_text = (self.cpu_dir / "online").read_text()

    def offline(self, cpus: list[int], online: str) -> None:
        for cpu in cpus:
            base = self.cpu_dir / f"cpu{cpu}"
            for part in ("topology", "cache"):
                shutil.move(base / part, self.saved / f"cpu{cpu}" / part)
            (base / "online").write_text("0\n")
        (self.cpu_dir / "online").write_text(online + "\n")

    def online(self, cpus: list[int]) -> None:
        for cpu in cpus:
            base = self.cpu_dir / f"cpu{cpu}"
            for part in ("topology", "cache"):
                shutil.move(self.saved / f"cpu{cpu}" / part, base / part)
            (base / "online").write_text("1\n")
        (self.cpu_dir / "online").write_text(self.online_text)
