"""The compose stack on a real Docker engine: `up --wait` brings every service to healthy, the
api answers, a claim made through the stack's `dev` service reaches the allocator and the
runtime simulator and is released again, every container runs hardened (read from the engine
and the kernel, not from the compose file), and `down -v` leaves nothing behind."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from harness.compose_stack import Stack, leftovers

# The first test builds every image (minutes, cold); the stack takes a minute to start.
pytestmark = [pytest.mark.docker, pytest.mark.timeout(1800)]

LONG_RUNNING = [
    "apiserver",
    "topology",
    "allocator",
    "runtime-sim",
    "nri-plugin",
    "dra-plugin",
    "kubelet-sim",
    "api",
]
NON_ROOT_UID = "65532"


@pytest.mark.parametrize(
    "path",
    ["/healthz", "/readyz", "/v1/node", "/v1/claims", "/v1/shared-pool", "/metrics", "/ui"],
)
def test_api_answers(stack: Stack, path: str) -> None:
    response = httpx.get(stack.api + path, timeout=30)
    assert response.status_code == 200, response.text


def test_setup_step_ran_and_exited_cleanly(stack: Stack) -> None:
    state = stack.container("init")["State"]
    assert state["Status"] == "exited" and state["ExitCode"] == 0, state  # type: ignore[index]


def proc_status(pid: int) -> dict[str, str]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return fields


def root_mount_options(pid: int) -> list[str]:
    for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines():
        fields = line.split()
        if fields[4] == "/":
            return fields[5].split(",")
    raise AssertionError(f"no root mount for pid {pid}")


@pytest.mark.parametrize("service", LONG_RUNNING)
def test_container_runs_unprivileged_on_a_read_only_root(stack: Stack, service: str) -> None:
    inspected = stack.container(service)
    host = inspected["HostConfig"]
    assert host["ReadonlyRootfs"] is True  # type: ignore[index]
    assert host["CapDrop"] == ["ALL"]  # type: ignore[index]
    assert not host["CapAdd"]  # type: ignore[index]
    assert host["Privileged"] is False  # type: ignore[index]
    pid = int(inspected["State"]["Pid"])  # type: ignore[index]
    assert pid > 0
    # The kernel's view of the container's main process.
    status = proc_status(pid)
    assert status["Uid"].split() == [NON_ROOT_UID] * 4
    assert status["Gid"].split() == [NON_ROOT_UID] * 4
    assert int(status["CapEff"], 16) == 0
    assert int(status["CapPrm"], 16) == 0
    assert int(status["CapBnd"], 16) == 0
    assert status["NoNewPrivs"] == "1"
    assert "ro" in root_mount_options(pid)


def claims(stack: Stack) -> dict[str, dict[str, Any]]:
    document = httpx.get(stack.api + "/v1/claims", timeout=30).json()
    return {claim["name"]: claim for claim in document["claims"]}


def test_claim_and_release_through_the_stack(stack: Stack) -> None:
    made = stack.compose("run", "--rm", "dev", "claim", "--cpus", "2", "--name", "compose-claim")
    fields = dict(word.split("=", 1) for word in made.split() if "=" in word)
    assert fields["claim"] == "default/compose-claim"
    # The allocator's view through the api: two CPUs, owned by the runtime simulator's
    # running container, the same CPUs the container was given.
    claim = claims(stack)["compose-claim"]
    assert claim["cpu_count"] == 2
    assert claim["owner"]["running"] is True
    assert claim["owner"]["container_id"] == fields["container"]
    assert claim["cpus"] == fields["cpus"] == fields["cpuset"]
    released = stack.compose("run", "--rm", "dev", "release", "compose-claim")
    assert released.startswith("released claim=default/compose-claim")
    assert "compose-claim" not in claims(stack)


def test_down_removes_everything(stack: Stack) -> None:
    stack.compose("down", "-v", "--remove-orphans")
    assert leftovers(stack.engine) == {"containers": [], "volumes": [], "networks": []}
