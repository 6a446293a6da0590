"""The shape of the code a newcomer reads: modules and functions small enough to hold, one
naming scheme in every service, the larger services in folders by layer, imports without cycles,
one way to log."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ROOT / "services"
MAX_MODULE_LINES = 700
MAX_FUNCTION_LINES = 100
MAX_CLASS_LINES = 250
# service folder -> package
PACKAGES = {
    "topology": "topology",
    "allocator": "allocator",
    "dra-plugin": "dra_plugin",
    "nri-plugin": "nri_plugin",
    "api": "api",
}
GRPC_SERVICES = ("topology", "allocator", "dra-plugin", "nri-plugin")
# package -> its folders, from the top layer to the bottom one. A module in a folder imports only
# its own folder and the folders below it; the package's top-level modules (the service's
# command line, runtime and servicer) stand above every folder.
LAYERS = {
    "allocator": ("rpc", "live", "store", "claims", "domain", "algorithm"),
    "dra_plugin": ("publishing", "kubelet", "cluster", "common"),
    "nri_plugin": ("events", "state", "transport"),
}
MAX_TOP_MODULES = 10


def sources(services: Path = SERVICES) -> Iterator[Path]:
    for path in sorted(services.rglob("*.py")):
        if "/dracpu/pb/" not in path.as_posix():
            yield path


def module_name(path: Path, services: Path = SERVICES) -> str:
    """`services/allocator/dracpu/allocator/store/cdi.py` -> `dracpu.allocator.store.cdi`."""
    parts = path.relative_to(services).with_suffix("").parts[1:]  # drop the service folder
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def test_no_module_is_over_the_line_limit() -> None:
    long = {
        rel(p): n for p in sources() if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}


def test_no_function_is_over_the_line_limit() -> None:
    long: dict[str, int] = {}
    for path in sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                assert node.end_lineno is not None
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long[f"{rel(path)}:{node.lineno} {node.name}"] = lines
    assert long == {}


def test_no_class_is_over_the_line_limit() -> None:
    long: dict[str, int] = {}
    for path in sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                assert node.end_lineno is not None
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_CLASS_LINES:
                    long[f"{rel(path)}:{node.lineno} {node.name}"] = lines
    assert long == {}


@pytest.mark.parametrize("service", sorted(PACKAGES))
def test_every_service_names_its_modules_alike(service: str) -> None:
    package = SERVICES / service / "dracpu" / PACKAGES[service]
    names = {p.name for p in package.glob("*.py")}
    assert {"flags.py", "main.py", "runtime.py"} <= names
    assert ("servicer.py" in names) == (service in GRPC_SERVICES)
    assert not names & {"server.py", "serving.py", "service.py"}


def test_console_scripts_are_the_services_main() -> None:
    # Declared by setup.py; as the installed distribution has them.
    declared = metadata.distribution("dra-driver-cpu").entry_points.select(group="console_scripts")
    scripts = {ep.name: ep.value for ep in declared}
    for service, package in PACKAGES.items():
        assert scripts[f"dracpu-{service}"] == f"dracpu.{package}.main:main"


def test_the_two_claim_modules_have_distinct_names() -> None:
    plugin = {p.stem for p in (SERVICES / "dra-plugin/dracpu/dra_plugin").rglob("*.py")}
    allocator = {p.stem for p in (SERVICES / "allocator/dracpu/allocator").rglob("*.py")}
    assert not {name for name in plugin & allocator if "claim" in name}


def _module_imports(path: Path, known: set[str]) -> set[str]:
    """The dracpu modules a module imports, wherever the import statement is: at the top, in a
    function, or under TYPE_CHECKING."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                found.add(full if full in known else node.module)
    return {name for name in found if name in known}


def import_graph(services: Path = SERVICES) -> dict[str, set[str]]:
    paths = {module_name(p, services): p for p in sources(services)}
    known = set(paths)
    return {name: _module_imports(path, known) - {name} for name, path in paths.items()}


def upward_imports(graph: dict[str, set[str]], package: str, folders: tuple[str, ...]) -> list[str]:
    """Imports of `dracpu.<package>` that break its layers: a module in a folder importing a
    folder above its own, or the package's top-level modules (which stand above every folder)."""
    prefix = f"dracpu.{package}."

    def rank(module: str) -> int | None:
        """The folder's rank (0 = top folder; a folder's own `__init__` too), None for a
        top-level module."""
        parts = module.removeprefix(prefix).split(".")
        if parts[0] in folders:
            return folders.index(parts[0])
        if len(parts) == 1:
            return None
        raise AssertionError(f"{module}: folder {parts[0]!r} is not in the layer rules")

    upward: list[str] = []
    for module, deps in sorted(graph.items()):
        if not module.startswith(prefix) or (own := rank(module)) is None:
            continue
        for dep in sorted(deps):
            if not dep.startswith(prefix):
                continue
            dep_rank = rank(dep)
            if dep_rank is None or dep_rank < own:
                upward.append(f"{module} -> {dep}")
    return upward


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    cycles: list[list[str]] = []
    state: dict[str, int] = {}

    def visit(name: str, stack: list[str]) -> None:
        state[name] = 1
        for dep in sorted(graph[name]):
            if state.get(dep) == 1:
                cycles.append([*stack[stack.index(dep) :], dep])
            elif dep not in state:
                visit(dep, [*stack, dep])
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    return cycles


@pytest.mark.parametrize("package", sorted(LAYERS))
def test_the_larger_services_keep_few_modules_at_their_top(package: str) -> None:
    service = next(s for s, p in PACKAGES.items() if p == package)
    top = SERVICES / service / "dracpu" / package
    assert len(list(top.glob("*.py"))) <= MAX_TOP_MODULES
    assert {p.name for p in top.iterdir() if p.is_dir() and p.name != "__pycache__"} == set(
        LAYERS[package]
    )


@pytest.mark.parametrize("package", sorted(LAYERS))
def test_a_layer_imports_only_its_own_folder_and_those_below(package: str) -> None:
    graph = import_graph()
    assert any(m.startswith(f"dracpu.{package}.") for m in graph), "the rules see no module"
    assert upward_imports(graph, package, LAYERS[package]) == []


def test_module_imports_have_no_cycle() -> None:
    assert import_cycles(import_graph()) == []


def _plant(services: Path, module: str, source: str) -> None:
    """A module of a throwaway `allocator` service tree, e.g. `store.records`."""
    path = services / "allocator" / "dracpu" / "allocator" / (module.replace(".", "/") + ".py")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source)


@pytest.fixture
def planted(tmp_path: Path) -> Path:
    """A small tree laid out as the services are, obeying the allocator's layer rules."""
    _plant(tmp_path, "runtime", "from dracpu.allocator.rpc import wire\n")
    _plant(tmp_path, "rpc.wire", "from dracpu.allocator.store import records\n")
    _plant(tmp_path, "store.records", "import dracpu.allocator.claims.model\n")
    _plant(tmp_path, "store.durable", "")
    _plant(tmp_path, "claims.model", "from dracpu.allocator.domain.quantity import parse\n")
    _plant(tmp_path, "domain.quantity", "def parse() -> None: ...\n")
    return tmp_path


def test_the_layer_rules_pass_a_tree_that_obeys_them(planted: Path) -> None:
    graph = import_graph(planted)
    assert graph["dracpu.allocator.store.records"] == {"dracpu.allocator.claims.model"}
    assert upward_imports(graph, "allocator", LAYERS["allocator"]) == []
    assert import_cycles(graph) == []


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("store.durable", "from dracpu.allocator.rpc import wire\n"),
        ("domain.quantity", "import dracpu.allocator.live.state\n"),
        ("claims.model", "from dracpu.allocator import runtime\n"),
        ("store.durable", "def f() -> None:\n    from dracpu.allocator.rpc import wire\n"),
    ],
    ids=["folder-above", "plain-import", "top-level-module", "inside-a-function"],
)
def test_the_layer_rules_catch_a_planted_upward_import(
    planted: Path, module: str, source: str
) -> None:
    _plant(planted, "live.state", "")
    _plant(planted, module, source)
    upward = upward_imports(import_graph(planted), "allocator", LAYERS["allocator"])
    assert len(upward) == 1
    assert upward[0].startswith(f"dracpu.allocator.{module} -> ")


def test_the_layer_rules_refuse_a_folder_they_do_not_name(planted: Path) -> None:
    _plant(planted, "helpers.misc", "from dracpu.allocator.store import records\n")
    with pytest.raises(AssertionError, match="folder 'helpers' is not in the layer rules"):
        upward_imports(import_graph(planted), "allocator", LAYERS["allocator"])


def test_the_cycle_check_catches_a_planted_cycle(planted: Path) -> None:
    _plant(planted, "domain.quantity", "from dracpu.allocator.domain import devices\n")
    _plant(planted, "domain.devices", "import dracpu.allocator.domain.quantity\n")
    assert import_cycles(import_graph(planted)) == [
        [
            "dracpu.allocator.domain.quantity",
            "dracpu.allocator.domain.devices",
            "dracpu.allocator.domain.quantity",
        ]
    ]


def test_loggers_are_named_for_their_module_and_the_log_module_is_never_aliased() -> None:
    wrong: list[str] = []
    for path in [*sources(), *sorted((ROOT / "dev").rglob("*.py"))]:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "dracpu.core":
                wrong += [
                    f"{rel(path)}: imports dracpu.core.log" for a in node.names if a.name == "log"
                ]
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "get_logger"
                and not (
                    len(node.args) == 1
                    and isinstance(node.args[0], ast.Name)
                    and node.args[0].id == "__name__"
                )
            ):
                wrong.append(f"{rel(path)}:{node.lineno}: get_logger({ast.unparse(node.args)})")
    assert wrong == []


def test_no_service_waits_with_asyncio_wait_for() -> None:
    """On Python 3.11 asyncio.wait_for can lose a cancellation (dracpu.core.tasks.within says
    how); the services and the dev tools wait with `within` or asyncio.timeout instead."""
    wrong = [
        f"{rel(path)}:{node.lineno}"
        for path in [*sources(), *sorted((ROOT / "dev").rglob("*.py"))]
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute)
        and node.attr == "wait_for"
        and isinstance(node.value, ast.Name)
        and node.value.id == "asyncio"
    ]
    assert wrong == []
