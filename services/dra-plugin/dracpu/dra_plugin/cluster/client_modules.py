"""The official Kubernetes client's modules the dra-plugin runs on, loaded without the rest.

`import kubernetes` (or any of its submodules) first runs the package's `__init__`, which
imports every generated API class and model (about 300 modules more, some 8 MB of a process's
memory, 6 of them private) plus the dynamic client, streams, informers and leader election. The
dra-plugin sends raw JSON through `ApiClient` and reads what the server sent, so it needs the
configuration, the API client, its REST layer and exceptions, the watch's line reader and the
config loaders.

`load()` registers the client's packages as plain package modules over the installed folders
(so importing a submodule no longer runs the package's `__init__`) and imports the few modules
the plugin uses. Everything else still works on first use: a name the lean package lacks makes
it run the package's real `__init__` (`kubernetes.client.CoreV1Api`, `kubernetes.config.
load_kube_config`), and a model class is imported alone when asked for
(`kubernetes.client.models.V1Node`). Only the dra-plugin's service process calls it, before
anything imports the client; where the client is already imported it does nothing.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
import types
from collections.abc import Callable
from pathlib import Path

from dracpu.core.log import get_logger

log = get_logger(__name__)

# Packages whose __init__ would import far more than the plugin uses.
LEAN_PACKAGES = ("kubernetes", "kubernetes.client", "kubernetes.config", "kubernetes.utils",
                 "kubernetes.watch")  # fmt: skip
MODELS = "kubernetes.client.models"
USED = (
    "kubernetes.client.configuration",
    "kubernetes.client.exceptions",
    "kubernetes.client.rest",
    "kubernetes.client.api_client",
    "kubernetes.config.config_exception",
    "kubernetes.config.incluster_config",
    "kubernetes.watch.watch",
)
_REAL_DUNDERS = ("__all__", "__version__", "__project__")
_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")


def load() -> bool:
    """Makes the client's packages lean and imports the modules the plugin uses; False (and
    nothing changed) when the client was imported already or its layout is not the expected
    one, in which case the plain import is what runs."""
    if _imported():
        return False
    spec = importlib.util.find_spec("kubernetes")
    if spec is None or spec.origin is None:
        return False
    root = Path(spec.origin).parent
    if not all((root / rel / "__init__.py").is_file() for rel in ("client", "config", "watch")):
        return False
    for name in LEAN_PACKAGES:
        _register(name, root, _run_real_init)
    _register(MODELS, root, _import_model)
    try:
        for name in USED:
            importlib.import_module(name)
    except ImportError as exc:  # a client release laid out otherwise: take the plain import
        for name in _imported():
            del sys.modules[name]
        log.info(2, "kubernetes client imported whole", reason=str(exc))
        return False
    client = sys.modules["kubernetes.client"]
    client.ApiClient = sys.modules["kubernetes.client.api_client"].ApiClient  # type: ignore[attr-defined]
    client.Configuration = sys.modules["kubernetes.client.configuration"].Configuration  # type: ignore[attr-defined]
    return True


def _imported() -> list[str]:
    return [n for n in sys.modules if n == "kubernetes" or n.startswith("kubernetes.")]


def _register(name: str, root: Path, missing: Callable[[types.ModuleType, str], object]) -> None:
    folder = root.joinpath(*name.split(".")[1:])
    module = types.ModuleType(name)
    module.__path__ = [str(folder)]
    module.__file__ = str(folder / "__init__.py")
    module.__package__ = name
    # PEP 562: a module's __getattr__ answers the names it does not hold.
    vars(module)["__getattr__"] = lambda attr: missing(module, attr)
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, module)


def _run_real_init(module: types.ModuleType, attr: str) -> object:
    """A name the lean package lacks: a submodule of that name, else what the package's own
    __init__ defines (run once, into the same module)."""
    if attr.startswith("__") and attr not in _REAL_DUNDERS:
        raise AttributeError(attr)
    try:
        return importlib.import_module(f"{module.__name__}.{attr}")
    except ModuleNotFoundError as exc:
        if exc.name != f"{module.__name__}.{attr}":
            raise
    if not module.__dict__.get("_dracpu_whole"):
        module._dracpu_whole = True  # type: ignore[attr-defined]
        source = Path(str(module.__file__)).read_text(encoding="utf-8")
        exec(compile(source, str(module.__file__), "exec"), module.__dict__)
    if attr in module.__dict__:
        return module.__dict__[attr]
    raise AttributeError(f"module {module.__name__!r} has no attribute {attr!r}")


def _import_model(module: types.ModuleType, attr: str) -> object:
    """A model class by name, from its own module (V1Node from models/v1_node.py)."""
    if not attr[:1].isupper():
        raise AttributeError(attr)
    try:
        own = importlib.import_module(f"{MODELS}.{_CAMEL.sub('_', attr).lower()}")
    except ModuleNotFoundError:
        raise AttributeError(f"module {MODELS!r} has no attribute {attr!r}") from None
    value = getattr(own, attr)
    setattr(module, attr, value)
    return value
