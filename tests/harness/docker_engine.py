"""The docker tier's private engine (tools/tier-docker.sh) as the tests drive it: the docker
client pointed at its socket, the images built on it, and a compose project run on it."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
TIER = ROOT / "tools" / "tier-docker.sh"
BUILD = ROOT / "tools" / "build-images.sh"
COMPOSE_FILE = ROOT / "compose" / "docker-compose.yaml"
SERVICES = ["topology", "allocator", "dra-plugin", "nri-plugin", "api"]
# The engine of the tests: its own state folder and network range, apart from any other.
STATE = os.environ.get("DRACPU_DOCKER_TEST_STATE", "/tmp/dracpu-docker-tests")
POOL = os.environ.get("DRACPU_DOCKER_TEST_POOL", "10.214.0.0/16")


def tier_env() -> dict[str, str]:
    return {**os.environ, "DRACPU_DOCKER_STATE": STATE, "DRACPU_DOCKER_POOL": POOL}


def tier(*args: str, timeout: float = 600) -> str:
    """Runs a tier-docker.sh subcommand; its stdout (progress goes to stderr)."""
    result = subprocess.run(
        ["bash", str(TIER), *args],
        env=tier_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"tier-docker.sh {' '.join(args)}: {result.stderr.strip()[-2000:]}")
    return result.stdout


@dataclass(frozen=True)
class Engine:
    env: dict[str, str]
    base_image: str
    tag: str

    def run(
        self, *args: str, timeout: float = 300, check: bool = True, **extra_env: str
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            list(args),
            env={**self.env, **extra_env},
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            cwd=ROOT,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"{' '.join(args)} exited {result.returncode}: {result.stderr.strip()[-3000:]}"
            )
        return result

    def docker(self, *args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        return self.run("docker", *args, **kwargs)

    def inspect(self, kind: str, name: str) -> dict[str, Any]:
        found: list[dict[str, Any]] = json.loads(self.docker(kind, "inspect", name).stdout)
        return found[0]

    def image(self, service: str) -> str:
        return f"localhost/dracpu-{service}:{self.tag}"


def engine_env() -> dict[str, str]:
    env = dict(tier_env())
    for line in tier("env").splitlines():
        key, _, value = line.partition("=")
        env[key] = value
    env["DOCKER_BUILDKIT"] = "0"
    return env
