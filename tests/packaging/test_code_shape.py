"""The shape of the code a newcomer reads: modules and functions small enough to hold, one
naming scheme in every service, module-level imports without cycles, one way to log."""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ROOT / "services"
MAX_MODULE_LINES = 700
MAX_FUNCTION_LINES = 100
# service folder -> package
PACKAGES = {
    "topology": "topology",
    "allocator": "allocator",
    "dra-plugin": "dra_plugin",
    "nri-plugin": "nri_plugin",
    "api": "api",
}
GRPC_SERVICES = ("topology", "allocator", "dra-plugin", "nri-plugin")


def sources() -> Iterator[Path]:
    for path in sorted(SERVICES.rglob("*.py")):
        if "/dracpu/pb/" not in path.as_posix():
            yield path


def module_name(path: Path) -> str:
    parts = path.relative_to(SERVICES).with_suffix("").parts[1:]  # drop the service folder
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


@pytest.mark.parametrize("service", sorted(PACKAGES))
def test_every_service_names_its_modules_alike(service: str) -> None:
    package = SERVICES / service / "dracpu" / PACKAGES[service]
    names = {p.name for p in package.glob("*.py")}
    assert {"flags.py", "main.py", "runtime.py"} <= names
    assert ("servicer.py" in names) == (service in GRPC_SERVICES)
    assert not names & {"server.py", "serving.py", "service.py"}


def test_console_scripts_are_the_services_main() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    scripts = project["scripts"]
    for service, package in PACKAGES.items():
        assert scripts[f"dracpu-{service}"] == f"dracpu.{package}.main:main"


def test_the_two_claim_modules_have_distinct_names() -> None:
    plugin = {p.stem for p in (SERVICES / "dra-plugin/dracpu/dra_plugin").glob("*.py")}
    allocator = {p.stem for p in (SERVICES / "allocator/dracpu/allocator").glob("*.py")}
    assert not {name for name in plugin & allocator if "claim" in name}


def _module_imports(path: Path, known: set[str]) -> set[str]:
    """The dracpu modules a module imports when it is loaded (TYPE_CHECKING blocks and
    imports inside functions excluded)."""
    found: set[str] = set()
    tree = ast.parse(path.read_text())
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        for sub in ast.walk(node):
            if isinstance(sub, ast.FunctionDef | ast.AsyncFunctionDef):
                break
            if isinstance(sub, ast.Import):
                found |= {a.name for a in sub.names if a.name in known}
            elif isinstance(sub, ast.ImportFrom) and sub.module and sub.level == 0:
                for alias in sub.names:
                    full = f"{sub.module}.{alias.name}"
                    found.add(full if full in known else sub.module)
    return {name for name in found if name in known}


def test_module_imports_have_no_cycle() -> None:
    paths = {module_name(p): p for p in sources()}
    known = set(paths)
    graph = {name: _module_imports(path, known) - {name} for name, path in paths.items()}
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
    assert cycles == []


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
