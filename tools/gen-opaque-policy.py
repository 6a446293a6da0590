"""Writes the chart's admission policy for dra.cpu opaque configurations, generated from the
allocator's schema (dracpu.allocator.domain.opaque_cel), into helm/dra-driver-cpu/templates.

    .venv/bin/python tools/gen-opaque-policy.py          # write it
    .venv/bin/python tools/gen-opaque-policy.py --check  # exit 1 when the chart's copy differs
"""

from __future__ import annotations

import sys
from pathlib import Path

from dracpu.allocator.domain.opaque_cel import TEMPLATE, policy_template

CHART = Path(__file__).resolve().parent.parent / "helm" / "dra-driver-cpu"


def main(argv: list[str]) -> int:
    target = CHART / TEMPLATE
    wanted = policy_template()
    if argv == ["--check"]:
        if target.read_text(encoding="utf-8") != wanted:
            print(f"gen-opaque-policy: {target} is stale; run tools/gen-opaque-policy.py",
                  file=sys.stderr)  # fmt: skip
            return 1
        return 0
    if argv:
        print("usage: gen-opaque-policy.py [--check]", file=sys.stderr)
        return 2
    target.write_text(wanted, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
