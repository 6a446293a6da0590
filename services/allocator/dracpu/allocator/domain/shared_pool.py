"""`cpuConfig.sharedPool`: whether a claimed container runs on the shared pool too.

`exclude` (the default): the container runs on its claim's CPUs only. `include`: on its
claim's CPUs and the current shared pool, following the pool as it changes; the claim's CPUs
stay its own (the shared pool never holds a claimed CPU), so its threads pinned there keep
them to themselves while the rest may use the pool. The CPUs are chosen as without it.
"""

from __future__ import annotations

from typing import Literal

SharedPool = Literal["include", "exclude"]
DEFAULT: SharedPool = "exclude"
