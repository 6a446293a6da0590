"""A script of tools/ imported as a module, for tests of its functions: `load_tool("crio-runc")`
runs tools/crio-runc.py's top level under the module name `crio_runc` (registered in
sys.modules, where its dataclasses look their module up); its `main` is not called."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

TOOLS = Path(__file__).resolve().parents[2] / "tools"


def load_tool(name: str) -> ModuleType:
    """tools/`name`.py as a module."""
    spec = importlib.util.spec_from_file_location(name.replace("-", "_"), TOOLS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
