"""The service images, read from their Dockerfiles: a pinned slim Python base, a build stage that
generates the protos and builds the wheel, and a runtime stage holding only the shared core,
that one service and the third-party packages its code imports.

No Docker engine runs here, so the Dockerfiles are checked, not built."""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from helm_chart import ROOT, SERVICES, render

PYPROJECT = ROOT / "pyproject.toml"
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
    "kubernetes": "kubernetes",
    # The kubernetes client's HTTP transport: its exceptions surface through the client.
    "urllib3": "kubernetes",
    "fastapi": "fastapi",
    "starlette": "fastapi",
    "uvicorn": "uvicorn",
    # uvicorn's HTTP/1.1 protocol (a dependency of uvicorn): the api extends it.
    "h11": "uvicorn",
    "httpx": "httpx",
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
def test_base_is_a_pinned_slim_python(service: str) -> None:
    preamble, split = stages(dockerfile(service))
    args = dict(item.text.split("=", 1) for item in preamble if item.keyword == "ARG")
    assert BASE.match(args["PYTHON_IMAGE"]), args["PYTHON_IMAGE"]
    assert [stage[0].text for stage in split] == ["${PYTHON_IMAGE} AS build", "${PYTHON_IMAGE}"]


def test_every_image_and_compose_share_one_base() -> None:
    bases = set()
    for path in [*(dockerfile(s) for s in SERVICES), ROOT / "compose" / "dev.Dockerfile"]:
        preamble, _ = stages(path)
        bases |= {item.text.split("=", 1)[1] for item in preamble if item.keyword == "ARG"}
    env = (ROOT / "compose" / ".env").read_text()
    bases |= set(re.findall(r"^PYTHON_IMAGE=(.+)$", env, flags=re.MULTILINE))
    compose = (ROOT / "compose" / "docker-compose.yaml").read_text()
    bases |= set(re.findall(r"\$\{PYTHON_IMAGE:-([^}]+)\}", compose))
    assert len(bases) == 1, bases


@pytest.mark.parametrize("service", SERVICES)
def test_build_stage_copies_only_the_core_and_this_service(service: str) -> None:
    _, (build, runtime) = stages(dockerfile(service))
    sources = set()
    for item in build:
        if item.keyword == "COPY":
            *copied, _ = item.text.split()
            sources |= set(copied)
    assert sources == {
        "pyproject.toml",
        "setup.py",
        "README.md",
        "tools/genproto.py",
        "proto/",
        "services/core/",
        f"services/{service}/",
    }
    runs = " ".join(item.text for item in build if item.keyword == "RUN")
    assert "python tools/genproto.py" in runs
    assert "pip wheel --no-deps" in runs
    # The runtime stage takes the finished environment and nothing else.
    copies = [item.text for item in runtime if item.keyword == "COPY"]
    assert copies == ["--from=build /opt/dracpu /opt/dracpu"]


@pytest.mark.parametrize("service", SERVICES)
def test_build_context_admits_only_what_is_copied(service: str) -> None:
    ignore = (dockerfile(service).parent / "Dockerfile.dockerignore").read_text().splitlines()
    admitted = {line[1:] for line in ignore if line.startswith("!")}
    assert "*" in ignore
    assert admitted == {
        "pyproject.toml",
        "setup.py",
        "README.md",
        "tools/genproto.py",
        "proto/",
        "services/core/",
        f"services/{service}/",
    }


@pytest.mark.parametrize("service", SERVICES)
def test_service_code_imports_no_other_service(service: str) -> None:
    own = {"core", "pb", PACKAGE[service]}
    for folder in code_of(service):
        for name in imports_of(folder):
            parts = name.split(".")
            if parts[0] == "dracpu" and len(parts) > 1:
                assert parts[1] in own, f"{folder} imports {name}, which is not in the image"


@pytest.mark.parametrize("service", SERVICES)
def test_installs_exactly_the_distributions_the_code_imports(service: str) -> None:
    _, (build, _) = stages(dockerfile(service))
    runtime_install = next(
        item.text for item in build if item.keyword == "RUN" and "venv /opt/dracpu" in item.text
    )
    installed = {requirement_name(spec): spec for spec in quoted_specs(runtime_install)}
    imported = set()
    for folder in code_of(service):
        for name in imports_of(folder):
            top = name.split(".")[0]
            if top in sys.stdlib_module_names or top in ("__future__", "dracpu"):
                continue
            assert top in DISTRIBUTION, f"{folder} imports {top}: map it to its distribution"
            imported.add(normalize(DISTRIBUTION[top]))
    # The generated protobuf modules import the protobuf runtime.
    needed = imported | {"protobuf"}
    assert set(installed) == needed
    # Same version ranges as the distribution itself declares.
    declared = pyproject_specs()
    for name, spec in installed.items():
        assert spec == declared[name], f"{service}: {spec} differs from pyproject {declared[name]}"


@pytest.mark.parametrize("service", SERVICES)
def test_build_tools_match_the_dev_extras(service: str) -> None:
    _, (build, _) = stages(dockerfile(service))
    tools = quoted_specs(" ".join(item.text for item in build if item.keyword == "RUN"))
    grpc_tools = [spec for spec in tools if requirement_name(spec) == "grpcio-tools"]
    assert grpc_tools == [pyproject_specs()["grpcio-tools"]]


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
