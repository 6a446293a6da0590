"""The compose stack (compose/docker-compose.yaml) run on the docker tier's private engine as
one project, and the `stack` fixture that brings it up for a module of the docker tier."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from harness.docker_engine import COMPOSE_FILE, Engine

PROJECT = "dracpu-tests"


@dataclass(frozen=True)
class Stack:
    engine: Engine
    env: dict[str, str]
    api: str

    def compose(self, *args: str, timeout: float = 300, check: bool = True) -> str:
        result = self.engine.run(
            "docker",
            "compose",
            "-p",
            PROJECT,
            "-f",
            str(COMPOSE_FILE),
            *args,
            timeout=timeout,
            check=check,
            **self.env,
        )
        return result.stdout

    def container(self, service: str) -> dict[str, object]:
        ids = self.compose("ps", "-a", "-q", service).split()
        assert len(ids) == 1, f"{service}: {ids}"
        return self.engine.inspect("container", ids[0])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def leftovers(engine: Engine) -> dict[str, list[str]]:
    """The project's containers, volumes and networks still on the engine."""
    label = f"label=com.docker.compose.project={PROJECT}"
    return {
        kind: engine.docker(*command, "--filter", label).stdout.split()
        for kind, command in {
            "containers": ("ps", "-a", "-q"),
            "volumes": ("volume", "ls", "-q"),
            "networks": ("network", "ls", "-q"),
        }.items()
    }


@pytest.fixture(scope="module")
def stack(images: Engine) -> Iterator[Stack]:
    """The project up (every service healthy) on the tier's images, for a module's tests; its
    last test takes it down itself, and `down -v` runs again after the module either way."""
    port = free_port()
    env = {
        "BASE_IMAGE": images.base_image,
        "DRACPU_API_PORT": str(port),
        **{
            f"DRACPU_{s.upper().replace('-', '_')}_VERSION": images.tag
            for s in ("topology", "allocator", "dra-plugin", "nri-plugin", "api", "dev")
        },
    }
    running = Stack(images, env, f"http://127.0.0.1:{port}")
    running.compose("down", "-v", "--remove-orphans", check=False)
    try:
        running.compose("up", "--detach", "--wait", "--wait-timeout", "240", timeout=400)
    except AssertionError:
        print(running.compose("ps", "-a", check=False))
        print(running.compose("logs", "--tail", "30", check=False))
        running.compose("down", "-v", check=False)
        raise
    yield running
    running.compose("down", "-v", "--remove-orphans", check=False)
