"""compose/docker-compose.yaml runs what `dracpu dev up` runs: the same command lines, sockets,
readiness checks and fixture, on volumes that hold every path a service is given.

No Docker engine runs here, so the file is checked, not started: read as YAML with compose's
variable substitution, and loaded by compose-go, the loader docker compose itself uses."""

from __future__ import annotations

import itertools
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from helm_chart import ROOT

from dracpu.core.config import read_file
from dracpu.dev.layout import RunLayout
from dracpu.dev.services import (
    SERVICES,
    SIMULATORS,
    DevOptions,
    api_url,
    readiness,
    service_commands,
)
from dracpu.topology.fixtures import FIXTURES

COMPOSE = ROOT / "compose"
RUN_DIR = "/dracpu-dev"
CONFIG = "/etc/dracpu/config.yaml"
DRIVER_SERVICES = [name for name in SERVICES if name not in SIMULATORS]
_VARIABLE = re.compile(r"\$\$|\$\{(\w+)(?::-([^}]*))?\}")


def load_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for line in (COMPOSE / ".env").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            env[key] = value
    return env


def interpolate(value: Any, env: dict[str, str]) -> Any:
    """Compose's variable substitution: ${VAR}, ${VAR:-default}, and $$ for a literal $."""
    if isinstance(value, str):

        def substitute(match: re.Match[str]) -> str:
            if match.group(0) == "$$":
                return "$"
            name, default = match.group(1), match.group(2)
            if env.get(name):
                return env[name]
            assert default is not None, f"${{{name}}} has no value and no default"
            return default

        return _VARIABLE.sub(substitute, value)
    if isinstance(value, list):
        return [interpolate(item, env) for item in value]
    if isinstance(value, dict):
        return {key: interpolate(item, env) for key, item in value.items()}
    return value


ENV = load_env()
PROJECT: dict[str, Any] = interpolate(
    yaml.safe_load((COMPOSE / "docker-compose.yaml").read_text()), ENV
)
# What `up` starts; services in a profile (the `dev` CLI) run only on demand.
COMPOSED: dict[str, dict[str, Any]] = {
    name: service for name, service in PROJECT["services"].items() if "profiles" not in service
}
ON_DEMAND: dict[str, dict[str, Any]] = {
    name: service for name, service in PROJECT["services"].items() if "profiles" in service
}
LAYOUT = RunLayout.at(RUN_DIR)
OPTIONS = DevOptions(
    sysfs_root=LAYOUT.sysfs_dir,
    api_address="0.0.0.0:8080",
    apiserver_address="0.0.0.0:6443",
    apiserver_url="http://apiserver:6443",
    config=Path(CONFIG),
    verbosity=int(ENV["DRACPU_LOG_LEVEL"]),
)
DEV_COMMANDS = service_commands(LAYOUT, OPTIONS)


def argv(name: str) -> list[str]:
    service = COMPOSED[name]
    return [*service["entrypoint"], *service["command"]]


def mounts(name: str) -> dict[str, tuple[str, bool]]:
    """Container path -> (volume or host file, read-only)."""
    found = {}
    for entry in PROJECT["services"][name].get("volumes", []):
        source, target, *mode = entry.split(":")
        found[target] = (source, mode == ["ro"])
    return found


def mount_of(name: str, path: str) -> tuple[str, tuple[str, bool]] | None:
    best = None
    for target, mount in mounts(name).items():
        if (path == target or path.startswith(target + "/")) and (
            best is None or len(target) > len(best[0])
        ):
            best = (target, mount)
    return best


def test_compose_runs_the_dev_runners_processes_and_a_setup_step() -> None:
    assert set(COMPOSED) == {*SERVICES, "init"}


@pytest.mark.parametrize("name", SERVICES)
def test_command_line_is_the_dev_runners(name: str) -> None:
    assert argv(name) == DEV_COMMANDS[name]


@pytest.mark.parametrize("name", SERVICES)
def test_health_check_is_the_dev_runners_readiness(name: str) -> None:
    ready = readiness(name, LAYOUT, api_url(OPTIONS.api_address))
    test = COMPOSED[name]["healthcheck"]["test"]
    assert test[:3] == ["CMD", "dracpu", "health"]
    if ready.grpc_socket is not None:
        live = ["--live"] if ready.any_status else []
        assert test[3:] == [*live, "--socket", str(ready.grpc_socket)]
    else:
        assert ready.http_url is not None
        assert test[3] == "--url"
        # Same port and path; inside the container the check dials loopback.
        wanted = re.sub(r"^http://[^:/]+", "", ready.http_url)
        if ready.kubeconfig is not None:  # the path, on the server the kubeconfig names
            wanted = ":" + OPTIONS.apiserver_address.rpartition(":")[2] + ready.http_url
        assert re.sub(r"^http://[^:/]+", "", test[4]) == wanted


@pytest.mark.parametrize("name", SERVICES)
def test_every_path_a_service_is_given_is_on_a_volume(name: str) -> None:
    command = argv(name)
    for flag, value in itertools.pairwise(command):
        if not (flag.startswith("--") and value.startswith("/")):
            continue
        found = mount_of(name, value)
        assert found is not None, f"{name}: {flag} {value} is on no volume"
        _, (source, read_only) = found
        if flag.endswith("socket"):
            assert not read_only, f"{name}: {flag} {value} is on a read-only volume"
        if flag == "--config":
            assert source == "./config.yaml" and read_only
        if flag in ("--state-dir", "--cdi-dir") and name in DRIVER_SERVICES:
            assert not read_only, f"{name} writes {value}"


def test_each_folder_is_one_volume_everywhere() -> None:
    by_target: dict[str, set[str]] = {}
    for name in [*COMPOSED, *ON_DEMAND]:
        for target, (source, _) in mounts(name).items():
            by_target.setdefault(target, set()).add(source)
    for target, sources in by_target.items():
        assert len(sources) == 1, f"{target} is backed by {sources}"
    declared = set(PROJECT["volumes"])
    used = {source for sources in by_target.values() for source in sources}
    assert used - {"./config.yaml"} == declared


def test_sockets_are_where_the_dev_runner_puts_them() -> None:
    for service in ("topology", "allocator", "dra-plugin", "nri-plugin"):
        assert DEV_COMMANDS[service][DEV_COMMANDS[service].index("--socket") + 1] == str(
            LAYOUT.socket(service)
        )
        assert mounts(service)[str(LAYOUT.sockets)] == ("sockets", False)
    assert mounts("kubelet-sim")[str(LAYOUT.kubelet_root)] == ("kubelet", False)
    assert mounts("dra-plugin")[str(LAYOUT.kubelet_root)] == ("kubelet", False)
    assert mounts("nri-plugin")[str(LAYOUT.nri_socket.parent)] == ("nri", False)
    assert mounts("runtime-sim")[str(LAYOUT.nri_socket.parent)] == ("nri", False)


def test_start_order_follows_the_dev_runner() -> None:
    for name in SERVICES:
        for dependency in COMPOSED[name]["depends_on"]:
            if dependency == "init":
                continue
            assert SERVICES.index(dependency) < SERVICES.index(name), (name, dependency)
    # Each client waits for the peers whose sockets it is given.
    for name in SERVICES:
        command = argv(name)
        peers = {
            flag.removeprefix("--").removesuffix("-socket")
            for flag in command
            if flag.endswith("-socket") and flag in {f"--{s}-socket" for s in SERVICES}
        }
        assert peers <= set(COMPOSED[name]["depends_on"]), name
    assert "runtime-sim" in COMPOSED["nri-plugin"]["depends_on"]
    assert "dra-plugin" in COMPOSED["kubelet-sim"]["depends_on"]


def test_named_fixture_is_written_where_topology_reads() -> None:
    fixture = ENV["DRACPU_FIXTURE"]
    assert fixture in FIXTURES
    assert COMPOSED["init"]["environment"]["DRACPU_FIXTURE"] == fixture
    script = COMPOSED["init"]["command"][0]
    assert f'python -m dracpu.topology.fixtures "$DRACPU_FIXTURE" {LAYOUT.sysfs_dir}' in script
    assert mounts("topology")[str(LAYOUT.sysfs_dir)] == ("sysfs", True)


def test_setup_creates_every_folder_the_dev_runner_creates() -> None:
    script = COMPOSED["init"]["command"][0]
    created = set()
    for line in script.splitlines():
        if line.startswith("mkdir -p "):
            created |= set(line.split()[2:])
    # Logs and workloads are the dev runner's own bookkeeping, not the services'.
    wanted = {
        str(path)
        for path in LAYOUT.directories()
        if path not in (LAYOUT.logs_dir, LAYOUT.workloads_dir)
    }
    assert wanted <= created
    for path in created:
        assert mount_of("init", path) is not None, f"init creates {path} on no volume"


@pytest.mark.parametrize("name", DRIVER_SERVICES)
def test_each_service_builds_its_own_target_and_version(name: str) -> None:
    service = COMPOSED[name]
    assert service["build"]["dockerfile"] == "Dockerfile"
    assert service["build"]["target"] == name
    assert service["build"]["context"] == ".."
    variable = f"DRACPU_{name.upper().replace('-', '_')}_VERSION"
    assert service["image"] == f"localhost/dracpu-{name}:{ENV[variable]}"
    assert service["build"]["args"]["VERSION"] == ENV[variable]


@pytest.mark.parametrize("name", SERVICES)
def test_services_run_unprivileged(name: str) -> None:
    service = COMPOSED[name]
    assert service["user"] == "65532:65532"
    assert service["read_only"] is True
    assert service["cap_drop"] == ["ALL"]
    assert "cap_add" not in service
    assert "privileged" not in service
    assert all(not source.startswith("/") for source, _ in mounts(name).values())


def test_config_file_is_accepted_by_the_services_loader() -> None:
    document = read_file(str(COMPOSE / "config.yaml"))
    assert document["apiVersion"] == "v1alpha1"


def test_docker_composes_own_loader_resolves_the_same_project(compose_loader: Path) -> None:
    result = subprocess.run(
        [str(compose_loader), str(COMPOSE / "docker-compose.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    # The loader validates against the compose specification's schema and refuses on error.
    assert result.returncode == 0, result.stderr
    loaded = json.loads(result.stdout)
    assert loaded["name"] == "dracpu"
    assert set(loaded["services"]) == set(COMPOSED)
    assert set(loaded["volumes"]) == set(PROJECT["volumes"])
    for name, service in loaded["services"].items():
        assert [*service["entrypoint"], *service["command"]] == argv(name), name
        if "healthcheck" in COMPOSED[name]:
            assert service["healthcheck"]["test"] == COMPOSED[name]["healthcheck"]["test"]
        volumes = {
            volume["target"]: (
                volume["source"]
                if volume["type"] == "volume"
                else "./" + Path(volume["source"]).name,
                bool(volume.get("read_only", False)),
            )
            for volume in service["volumes"]
        }
        assert volumes == mounts(name), name
        assert set(service.get("depends_on", {})) == set(COMPOSED[name].get("depends_on", {}))
        assert service["user"] == COMPOSED[name]["user"]


def test_the_dev_cli_service_claims_on_the_stacks_run_folder() -> None:
    from dracpu.dev.cli import COMPOSE_RUN_DIR

    service = ON_DEMAND["dev"]
    assert service["entrypoint"] == ["dracpu", "dev", "--compose"]
    assert COMPOSE_RUN_DIR == RUN_DIR
    # What a claim reads and writes: the simulators' sockets, the API-server fake's kubeconfig
    # (slices in, claims out, over HTTP), the CDI specs the kubelet simulator's prepare wrote,
    # its own records.
    assert set(mounts("dev")) == {
        LAYOUT.sockets.as_posix(),
        LAYOUT.apiserver_kubeconfig.parent.as_posix(),
        LAYOUT.cdi_dir.as_posix(),
        LAYOUT.workloads_dir.as_posix(),
    }
    assert mounts("dev")[LAYOUT.cdi_dir.as_posix()][1] is True
    assert mounts("dev")[LAYOUT.apiserver_kubeconfig.parent.as_posix()] == ("apiserver", True)
    assert service["user"] == "65532:65532"
    assert service["read_only"] is True
    assert service["cap_drop"] == ["ALL"]
    # `run` would start what it depends on: init again, resetting the running stack's folder.
    assert service["depends_on"] == {}


def test_setup_step_changes_owners_only_on_volumes() -> None:
    # /dracpu-dev is on the setup container's read-only root: chown there fails.
    script = COMPOSED["init"]["command"][0]
    for line in script.splitlines():
        if line.strip().startswith("chown"):
            targets = [word for word in line.split()[1:] if not word.startswith("-")][1:]
            assert targets, line
            for target in targets:
                assert target != RUN_DIR and mount_of("init", target) is not None, target
