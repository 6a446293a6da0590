"""The images, read from the one Dockerfile: a pinned slim Python base (a build argument, pinned
there only), a build stage that builds offline from the wheels prepared on the host, a runtime
stage every image shares (the third-party packages the five services' code imports, at the
versions of constraints.txt, and nothing of any one service), and one target per image that
adds only the shared core and that one service.

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
DOCKERFILE = ROOT / "Dockerfile"
TARGETS = [*SERVICES, "dev"]
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


def named_stages() -> dict[str, list[Instruction]]:
    """The Dockerfile's stages by name (`FROM x AS name`)."""
    _, split = stages(DOCKERFILE)
    named = {}
    for stage in split:
        words = stage[0].text.split()
        assert len(words) == 3 and words[1].upper() == "AS", stage[0].text
        named[words[2]] = stage
    return named


def stage(name: str) -> list[Instruction]:
    return named_stages()[name]


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


def test_base_is_a_pinned_slim_python_given_as_a_build_argument() -> None:
    preamble, _ = stages(DOCKERFILE)
    args = dict(item.text.split("=", 1) for item in preamble if item.keyword == "ARG")
    assert BASE.match(args["BASE_IMAGE"]), args["BASE_IMAGE"]
    froms = {name: items[0].text.split()[0] for name, items in named_stages().items()}
    assert froms == {
        "build": "${BASE_IMAGE}",
        "dist": "build",
        "runtime": "${BASE_IMAGE}",
        **dict.fromkeys(TARGETS, "runtime"),
    }


def test_no_frontend_is_fetched_from_a_registry() -> None:
    # A `# syntax=` line makes BuildKit pull its frontend image before building anything.
    first = DOCKERFILE.read_text().splitlines()[0]
    assert not re.match(r"#\s*syntax\s*=", first, flags=re.IGNORECASE), first


def test_one_dockerfile_builds_every_image() -> None:
    assert not list(ROOT.glob("services/*/Dockerfile"))
    assert not list(ROOT.glob("compose/*Dockerfile"))
    script = (ROOT / "tools" / "build-images.sh").read_text()
    assert '-f Dockerfile -t "$image"' in script
    assert '--target "$svc"' in script


def test_the_dockerfile_alone_pins_the_base() -> None:
    pin = re.compile(r"python:3\.\d+[\w.-]*")
    for path in (
        ROOT / "compose" / ".env",
        ROOT / "compose" / "docker-compose.yaml",
        ROOT / "tools" / "build-images.sh",
    ):
        assert not pin.search(path.read_text()), f"{path.name} pins a base image of its own"
    compose = yaml.safe_load((ROOT / "compose" / "docker-compose.yaml").read_text())
    for name, service in compose["services"].items():
        if "build" in service:
            # Unset unless the environment gives one: the Dockerfile's default applies.
            assert service["build"]["args"]["BASE_IMAGE"] is None, name
    script = (ROOT / "tools" / "build-images.sh").read_text()
    assert "s/^ARG BASE_IMAGE=//p" in script


def test_build_stages_install_offline_at_the_constrained_versions() -> None:
    build, dist = stage("build"), stage("dist")
    env = " ".join(item.text for item in build if item.keyword == "ENV")
    assert "PIP_NO_INDEX=1" in env
    assert "PIP_FIND_LINKS=/wheels" in env
    assert "PIP_CONSTRAINT=/src/constraints.txt" in env
    copies = [item.text for item in build if item.keyword == "COPY"]
    assert ".wheels/ /wheels/" in copies
    assert any(c.startswith("constraints.txt ") for c in copies)
    runs = " ".join(item.text for item in [*build, *dist] if item.keyword == "RUN")
    # No version is written into the Dockerfile: constraints.txt is the one list.
    assert quoted_specs(runs) == []
    assert not re.search(r"\b[A-Za-z][\w.-]*(==|>=|<=|~=)\d", runs), runs
    assert "pip wheel --no-deps --no-build-isolation" in runs


def test_the_shared_layers_hold_nothing_of_any_one_service() -> None:
    # The build stage copies only the wheels and the pins: its environment, the one the
    # runtime stage copies, is the same whatever the sources are.
    sources = set()
    for item in stage("build"):
        if item.keyword == "COPY":
            *copied, _ = item.text.split()
            sources |= set(copied)
    assert sources == {".wheels/", "constraints.txt"}
    runtime = stage("runtime")
    copies = [item.text for item in runtime if item.keyword == "COPY"]
    assert copies == ["--from=build /opt/dracpu /opt/dracpu"]
    # No build argument in the shared stage: a per-image VERSION would change its layers.
    assert not [item for item in runtime if item.keyword == "ARG"]
    text = " ".join(item.text for item in runtime)
    for service in SERVICES:
        assert service not in text.replace("/run/dracpu", ""), service


def _wheel_loop() -> str:
    return next(
        item.text for item in stage("dist") if item.keyword == "RUN" and "pip wheel" in item.text
    )


def test_each_images_wheel_is_built_from_the_core_and_that_service_only() -> None:
    loop = _wheel_loop()
    listed = re.search(r"for image in ([\w -]+); do", loop)
    assert listed and listed.group(1).split() == TARGETS
    assert 'cp -a services/core "$tree/services/"' in loop
    assert 'cp -a "services/$image" "$tree/services/"' in loop
    assert 'cp -a services dev "$tree/"' in loop  # dev alone: the whole distribution
    assert '--root "/stage/$image"' in loop
    for target in TARGETS:
        copies = [item.text for item in stage(target) if item.keyword == "COPY"]
        assert copies == [f"--from=dist /stage/{target}/ /"], target


def test_each_service_keeps_only_its_own_console_scripts() -> None:
    loop = _wheel_loop()
    assert "! -name dracpu-topology ! -name dracpu-gatherinfo -delete" in loop
    assert '! -name "dracpu-$image" -delete' in loop


@pytest.mark.parametrize("target", TARGETS)
def test_build_ends_by_starting_the_entry_point(target: str) -> None:
    items = stage(target)
    entrypoint = yaml.safe_load(next(i.text for i in items if i.keyword == "ENTRYPOINT"))
    last = items[-1]
    assert last.keyword == "RUN"
    assert last.text.startswith(f"{entrypoint[0]} --help")


def test_runtime_stage_removes_the_bases_package_installer() -> None:
    runs = " ".join(item.text for item in stage("runtime") if item.keyword == "RUN")
    for leftover in ("site-packages/pip*", "site-packages/setuptools*", "ensurepip"):
        assert leftover in runs


def test_the_topology_image_has_the_reference_paths() -> None:
    runs = " ".join(item.text for item in stage("topology") if item.keyword == "RUN")
    assert "ln -s /opt/dracpu/bin/dracpu /dracpu" in runs
    assert "ln -s /opt/dracpu/bin/dracpu-gatherinfo /dracpu-gatherinfo" in runs


def dockerignore() -> list[str]:
    return [
        line
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line and not line.startswith("#")
    ]


def test_one_build_context_file_that_both_builders_read() -> None:
    # The classic builder reads only the context's own .dockerignore, never
    # <Dockerfile>.dockerignore: a per-Dockerfile file would send the whole tree.
    assert not list(ROOT.glob("*.Dockerfile.dockerignore"))
    assert not (ROOT / "Dockerfile.dockerignore").exists()
    assert dockerignore()[0] == "*"


def test_build_context_admits_what_every_dockerfile_copies() -> None:
    admitted = {line[1:] for line in dockerignore() if line.startswith("!")}
    _, split = stages(DOCKERFILE)
    for items in split:
        for item in items:
            if item.keyword != "COPY" or item.text.startswith("--from"):
                continue
            *copied, _ = item.text.split()
            for source in copied:
                top = source.split("/")[0] + "/"
                assert source in admitted or top in admitted, f"{source} not admitted"
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


def runtime_packages() -> set[str]:
    install = next(
        item.text
        for item in stage("build")
        if item.keyword == "RUN" and "venv --without-pip /opt/dracpu" in item.text
    )
    words = install.split("&&")[1].split(" install ", 1)[1].split()
    return {normalize(word) for word in words if not word.startswith("-")}


def test_installs_exactly_the_distributions_the_code_imports() -> None:
    # One shared environment: what the five services' code and the dev image's tooling
    # import, together.
    installed = runtime_packages()
    imported = set()
    folders = [folder for service in SERVICES for folder in code_of(service)]
    for folder in [*folders, ROOT / "dev" / "dracpu" / "dev"]:
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
        assert name in declared, f"the images install {name}, not a dependency in pyproject"
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
    preamble, _ = stages(DOCKERFILE)
    defaults = dict(item.text.split("=", 1) for item in preamble if item.keyword == "ARG")
    assert re.fullmatch(r"\d+\.\d+\.\d+(rc\d+|\.dev\d+)?", defaults["VERSION"])
    items = stage(service)
    assert {item.text for item in items if item.keyword == "ARG"} == {"VERSION", "REVISION"}
    env = " ".join(item.text for item in items if item.keyword == "ENV")
    assert "DRACPU_IMAGE_VERSION=${VERSION}" in env
    labels = " ".join(item.text for item in items if item.keyword == "LABEL")
    assert 'org.opencontainers.image.version="${VERSION}"' in labels
    assert f'org.opencontainers.image.title="dracpu-{service}"' in labels
    assert f'io.dracpu.api-version="dracpu.{PACKAGE[service]}.v1"' in labels
    assert "org.opencontainers.image.revision=" in labels


@pytest.mark.parametrize("service", SERVICES)
def test_entrypoint_user_and_healthcheck(service: str, helm: Path) -> None:
    by_keyword = {item.keyword: item.text for item in stage(service)}
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
