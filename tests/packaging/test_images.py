"""The service images, read from their Dockerfiles: a pinned slim Python base (a build argument),
a build stage that builds the wheel offline from the wheels prepared on the host, and a runtime
stage holding only the shared core, that one service and the third-party packages its code
imports, at the versions of constraints.txt.

These read the files; tests/docker builds and runs the images on a real engine."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from dataclasses import dataclass
from importlib.metadata import requires, version
from pathlib import Path

import pytest
import yaml
from helm_chart import ROOT, SERVICES, render
from packaging.requirements import Requirement

PYPROJECT = ROOT / "pyproject.toml"
CONSTRAINTS = ROOT / "constraints.txt"
BASE = re.compile(r"^python:3\.11\.\d+-slim-bookworm$")
PACKAGE = {
    "topology": "topology",
    "allocator": "allocator",
    "dra-plugin": "dra_plugin",
    "nri-plugin": "nri_plugin",
    "api": "api",
}
NON_ROOT = {"topology", "allocator", "api"}
# Top-level import name -> the distribution that provides it.
DISTRIBUTION = {
    "grpc": "grpcio",
    "grpc_health": "grpcio-health-checking",
    "google": "protobuf",
    "pydantic": "pydantic",
    # pydantic pins its compiled core exactly; importing it directly needs nothing more.
    "pydantic_core": "pydantic",
    "yaml": "pyyaml",
    "prometheus_client": "prometheus-client",
    "fastapi": "fastapi",
    "starlette": "fastapi",
    "uvicorn": "uvicorn",
    # uvicorn's HTTP/1.1 protocol (a dependency of uvicorn): the api extends it.
    "h11": "uvicorn",
    "httpx": "httpx",
    "kubernetes": "kubernetes",
    # The official client's transport (a dependency of kubernetes): the dra-plugin catches its
    # errors.
    "urllib3": "kubernetes",
}


@dataclass(frozen=True)
class Instruction:
    keyword: str
    text: str


def instructions(path: Path) -> list[Instruction]:
    """The Dockerfile's instructions, continuation lines joined, comments dropped."""
    found: list[Instruction] = []
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        whole = (pending + line).strip()
        pending = ""
        keyword, _, text = whole.partition(" ")
        found.append(Instruction(keyword.upper(), text.strip()))
    return found


def stages(path: Path) -> tuple[list[Instruction], list[list[Instruction]]]:
    """(instructions before the first FROM, one list per stage starting with its FROM)."""
    preamble: list[Instruction] = []
    split: list[list[Instruction]] = []
    for item in instructions(path):
        if item.keyword == "FROM":
            split.append([item])
        elif split:
            split[-1].append(item)
        else:
            preamble.append(item)
    return preamble, split


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(spec: str) -> str:
    match = re.match(r"[A-Za-z0-9_.-]+", spec)
    assert match, spec
    return normalize(match.group(0))


def pyproject_specs() -> dict[str, str]:
    text = PYPROJECT.read_text()
    specs = re.findall(r'^\s+"([A-Za-z][^"]*)",?$', text, flags=re.MULTILINE)
    return {requirement_name(spec): spec for spec in specs}


def quoted_specs(text: str) -> list[str]:
    return re.findall(r'"([A-Za-z][A-Za-z0-9_.-]*[<>=!~][^"]*)"', text)


def imports_of(folder: Path) -> set[str]:
    names: set[str] = set()
    for source in folder.rglob("*.py"):
        tree = ast.parse(source.read_text(), str(source))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module)
    return names


def code_of(service: str) -> list[Path]:
    return [
        ROOT / "services" / "core" / "dracpu" / "core",
        ROOT / "services" / service / "dracpu" / PACKAGE[service],
    ]


def dockerfile(service: str) -> Path:
    return ROOT / "services" / service / "Dockerfile"


@pytest.mark.parametrize("service", SERVICES)
def test_base_is_a_pinned_slim_python_given_as_a_build_argument(service: str) -> None:
    preamble, split = stages(dockerfile(service))
    args = dict(item.text.split("=", 1) for item in preamble if item.keyword == "ARG")
    assert BASE.match(args["BASE_IMAGE"]), args["BASE_IMAGE"]
    assert [stage[0].text for stage in split] == ["${BASE_IMAGE} AS build", "${BASE_IMAGE}"]


DOCKERFILES = [*(f"services/{s}/Dockerfile" for s in SERVICES), "compose/dev.Dockerfile"]


@pytest.mark.parametrize("path", DOCKERFILES)
def test_no_frontend_is_fetched_from_a_registry(path: str) -> None:
    # A `# syntax=` line makes BuildKit pull its frontend image before building anything.
    first = (ROOT / path).read_text().splitlines()[0]
    assert not re.match(r"#\s*syntax\s*=", first, flags=re.IGNORECASE), first


def test_every_image_and_compose_share_one_base() -> None:
    bases = set()
    for path in DOCKERFILES:
        preamble, _ = stages(ROOT / path)
        bases |= {item.text.split("=", 1)[1] for item in preamble if item.keyword == "ARG"}
    env = (ROOT / "compose" / ".env").read_text()
    bases |= set(re.findall(r"^BASE_IMAGE=(.+)$", env, flags=re.MULTILINE))
    compose = (ROOT / "compose" / "docker-compose.yaml").read_text()
    bases |= set(re.findall(r"\$\{BASE_IMAGE:-([^}]+)\}", compose))
    script = (ROOT / "tools" / "build-images.sh").read_text()
    bases |= set(re.findall(r'BASE_IMAGE="\$\{BASE_IMAGE:-([^}]+)\}"', script))
    assert len(bases) == 1, bases


@pytest.mark.parametrize("path", DOCKERFILES)
def test_build_stage_installs_offline_at_the_constrained_versions(path: str) -> None:
    _, (build, _) = stages(ROOT / path)
    env = " ".join(item.text for item in build if item.keyword == "ENV")
    assert "PIP_NO_INDEX=1" in env
    assert "PIP_FIND_LINKS=/wheels" in env
    assert "PIP_CONSTRAINT=/src/constraints.txt" in env
    copies = [item.text for item in build if item.keyword == "COPY"]
    assert ".wheels/ /wheels/" in copies
    assert any(c.startswith("constraints.txt ") for c in copies)
    runs = " ".join(item.text for item in build if item.keyword == "RUN")
    # No version is written into a Dockerfile: constraints.txt is the one list.
    assert quoted_specs(runs) == []
    assert not re.search(r"\b[A-Za-z][\w.-]*(==|>=|<=|~=)\d", runs), runs
    assert "pip wheel --no-deps --no-build-isolation" in runs


@pytest.mark.parametrize("service", SERVICES)
def test_build_stage_copies_only_the_core_and_this_service(service: str) -> None:
    _, (build, runtime) = stages(dockerfile(service))
    sources = set()
    for item in build:
        if item.keyword == "COPY":
            *copied, _ = item.text.split()
            sources |= set(copied)
    assert sources == {
        ".wheels/",
        "constraints.txt",
        "pyproject.toml",
        "setup.py",
        "MANIFEST.in",
        "README.md",
        "tools/genproto.py",
        "proto/",
        "services/core/",
        f"services/{service}/",
    }
    # The runtime stage takes the finished environment and nothing else.
    copies = [item.text for item in runtime if item.keyword == "COPY"]
    assert copies == ["--from=build /opt/dracpu /opt/dracpu"]


@pytest.mark.parametrize("path", DOCKERFILES)
def test_build_ends_by_starting_the_entry_point(path: str) -> None:
    _, (_, runtime) = stages(ROOT / path)
    entrypoint = yaml.safe_load(next(i.text for i in runtime if i.keyword == "ENTRYPOINT"))
    last = runtime[-1]
    assert last.keyword == "RUN"
    assert last.text.startswith(f"{entrypoint[0]} --help")


@pytest.mark.parametrize("path", DOCKERFILES)
def test_runtime_stage_removes_the_bases_package_installer(path: str) -> None:
    _, (_, runtime) = stages(ROOT / path)
    runs = " ".join(item.text for item in runtime if item.keyword == "RUN")
    for leftover in ("site-packages/pip*", "site-packages/setuptools*", "ensurepip"):
        assert leftover in runs


def dockerignore() -> list[str]:
    return [
        line
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line and not line.startswith("#")
    ]


def test_one_build_context_file_that_both_builders_read() -> None:
    # The classic builder reads only the context's own .dockerignore, never
    # <Dockerfile>.dockerignore: a per-Dockerfile file would send the whole tree.
    assert not list(ROOT.glob("services/*/*.dockerignore"))
    assert not list(ROOT.glob("compose/*.dockerignore"))
    assert dockerignore()[0] == "*"


def test_build_context_admits_what_every_dockerfile_copies() -> None:
    admitted = {line[1:] for line in dockerignore() if line.startswith("!")}
    for path in DOCKERFILES:
        _, split = stages(ROOT / path)
        for stage in split:
            for item in stage:
                if item.keyword != "COPY" or item.text.startswith("--from"):
                    continue
                *copied, _ = item.text.split()
                for source in copied:
                    top = source.split("/")[0] + "/"
                    assert source in admitted or top in admitted, f"{path}: {source} not admitted"
    # Generated code and byte code never enter the context: the build generates its own.
    assert "services/core/dracpu/pb/*/" in dockerignore()
    assert "**/__pycache__" in dockerignore()


@pytest.mark.parametrize("service", SERVICES)
def test_service_code_imports_no_other_service(service: str) -> None:
    own = {"core", "pb", PACKAGE[service]}
    for folder in code_of(service):
        for name in imports_of(folder):
            parts = name.split(".")
            if parts[0] == "dracpu" and len(parts) > 1:
                assert parts[1] in own, f"{folder} imports {name}, which is not in the image"


def constraints() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in CONSTRAINTS.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"constraints.txt: {line!r} is not an exact pin"
            pins[normalize(name)] = version.strip()
    return pins


def runtime_packages(service: str) -> set[str]:
    _, (build, _) = stages(dockerfile(service))
    install = next(
        item.text
        for item in build
        if item.keyword == "RUN" and "venv --without-pip /opt/dracpu" in item.text
    )
    words = install.split("&&")[1].split(" install ", 1)[1].split()
    return {normalize(word) for word in words if not word.startswith("-")}


@pytest.mark.parametrize("service", SERVICES)
def test_installs_exactly_the_distributions_the_code_imports(service: str) -> None:
    installed = runtime_packages(service)
    imported = set()
    for folder in code_of(service):
        for name in imports_of(folder):
            top = name.split(".")[0]
            if top in sys.stdlib_module_names or top in ("__future__", "dracpu"):
                continue
            assert top in DISTRIBUTION, f"{folder} imports {top}: map it to its distribution"
            imported.add(normalize(DISTRIBUTION[top]))
    # The generated protobuf modules import the protobuf runtime.
    assert installed == imported | {"protobuf"}
    # Each is a declared dependency, pinned in constraints.txt.
    declared = pyproject_specs()
    pins = constraints()
    for name in installed:
        assert name in declared, f"{service} installs {name}, not a dependency in pyproject"
        assert name in pins, f"{name} has no pin in constraints.txt"


def test_constraints_pin_every_declared_dependency_within_its_range() -> None:
    pins = constraints()
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    runtime = project["dependencies"]
    for spec in [*runtime, *project["optional-dependencies"]["dev"]]:
        requirement = Requirement(spec)
        name = normalize(requirement.name)
        if spec in runtime:
            assert name in pins, f"{spec} has no pin in constraints.txt"
        if name in pins:
            assert requirement.specifier.contains(pins[name], prereleases=True), (
                f"{name}=={pins[name]} is outside {spec}"
            )


def test_generator_and_runtime_are_pinned_together() -> None:
    pins = constraints()
    build_system = re.search(r"^requires = \[(.*?)\]", PYPROJECT.read_text(), re.M)
    assert build_system
    assert f'"grpcio-tools=={pins["grpcio-tools"]}"' in build_system.group(1)
    # The protoc inside grpcio-tools writes gencode of the protobuf version grpcio-tools
    # itself requires: the pinned runtime must satisfy that requirement.
    assert version("grpcio-tools") == pins["grpcio-tools"], "the venv is not at the pins"
    assert version("protobuf") == pins["protobuf"], "the venv is not at the pins"
    needed = next(r for r in requires("grpcio-tools") or [] if r.startswith("protobuf"))
    assert Requirement(needed).specifier.contains(pins["protobuf"]), needed


def test_generated_modules_match_the_protobuf_runtime() -> None:
    generated = sorted((ROOT / "services" / "core" / "dracpu" / "pb").rglob("*_pb2.py"))
    assert generated, "no generated modules: make venv"
    runtime = tuple(int(part) for part in version("protobuf").split(".")[:3])
    for path in generated:
        match = re.search(r"Protobuf Python Version: (\d+)\.(\d+)\.(\d+)", path.read_text())
        assert match, path
        gencode = tuple(int(part) for part in match.groups())
        assert gencode[0] == runtime[0] and gencode <= runtime, f"{path.name}: {gencode}"


@pytest.mark.parametrize("service", SERVICES)
def test_labels_carry_the_images_own_version(service: str) -> None:
    _, (_, runtime) = stages(dockerfile(service))
    args = dict(
        item.text.split("=", 1) for item in runtime if item.keyword == "ARG" and "=" in item.text
    )
    assert re.fullmatch(r"\d+\.\d+\.\d+", args["VERSION"])
    labels = " ".join(item.text for item in runtime if item.keyword == "LABEL")
    assert 'org.opencontainers.image.version="${VERSION}"' in labels
    assert f'org.opencontainers.image.title="dracpu-{service}"' in labels
    assert f'io.dracpu.api-version="dracpu.{PACKAGE[service]}.v1"' in labels
    assert "org.opencontainers.image.revision=" in labels


@pytest.mark.parametrize("service", SERVICES)
def test_entrypoint_user_and_healthcheck(service: str, helm: Path) -> None:
    _, (_, runtime) = stages(dockerfile(service))
    by_keyword = {item.keyword: item.text for item in runtime}
    assert yaml.safe_load(by_keyword["ENTRYPOINT"]) == [f"dracpu-{service}"]
    healthcheck = by_keyword["HEALTHCHECK"]
    if service == "api":
        assert '"--url", "http://127.0.0.1:8080/healthz"' in healthcheck
    else:
        assert f'"--socket", "/run/dracpu/{service}.sock"' in healthcheck
    if service in NON_ROOT:
        assert by_keyword["USER"] == "65532:65532"
    else:
        assert "USER" not in by_keyword
    # The chart runs topology and the api as the image's own non-root user.
    context = render(helm).container(service)["securityContext"]
    if service in ("topology", "api"):
        assert f"{context['runAsUser']}:{context['runAsGroup']}" == by_keyword["USER"]
