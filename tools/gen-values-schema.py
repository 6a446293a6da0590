"""Writes the configuration parts of the chart's values.schema.json (`driverConfig` and the
deprecated `args.*` values), generated from the driver configuration's model
(dracpu.core.config_model); the rest of the file is kept as it is.

    .venv/bin/python tools/gen-values-schema.py          # write it
    .venv/bin/python tools/gen-values-schema.py --check  # exit 1 when the chart's copy differs
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from dracpu.core.config_schema import dump, values_schema

SCHEMA = Path(__file__).resolve().parent.parent / "helm" / "dra-driver-cpu" / "values.schema.json"


def main(argv: list[str]) -> int:
    current = SCHEMA.read_text(encoding="utf-8")
    wanted = dump(values_schema(json.loads(current)))
    if argv == ["--check"]:
        if current != wanted:
            print(f"gen-values-schema: {SCHEMA} is stale; run tools/gen-values-schema.py",
                  file=sys.stderr)  # fmt: skip
            return 1
        return 0
    if argv:
        print("usage: gen-values-schema.py [--check]", file=sys.stderr)
        return 2
    SCHEMA.write_text(wanted, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
