"""Every image, built offline on a real Docker engine, then run: its entry point answers, it
carries no package installer or compiler, it stays within its size budget, and without a
writable socket folder a service says so in one line."""

from __future__ import annotations

import pytest
from docker_engine import SERVICES, Engine

pytestmark = pytest.mark.docker

MB = 1_000_000
# Size above the base image. The dra-plugin carries the official kubernetes client, whose
# generated models and its google-auth/cryptography dependencies alone take about 40 MB.
BUDGET = {"topology": 40, "allocator": 40, "nri-plugin": 40, "api": 40, "dra-plugin": 75}
# The socket each gRPC service listens on by default, inside its image.
SOCKET = {
    "topology": "/run/dracpu/topology.sock",
    "allocator": "/run/dracpu/allocator.sock",
    "dra-plugin": "/run/dracpu/dra-plugin.sock",
    "nri-plugin": "/run/dracpu/nri-plugin.sock",
}


@pytest.mark.parametrize("service", [*SERVICES, "dev"])
def test_entry_point_answers_help(images: Engine, service: str) -> None:
    result = images.docker("run", "--rm", "--network", "none", images.image(service), "--help")
    assert result.stdout.startswith("usage: "), result.stdout
    assert result.stderr == ""


@pytest.mark.parametrize("service", SERVICES)
def test_no_package_installer_or_compiler_in_the_image(images: Engine, service: str) -> None:
    probe = (
        "import importlib.util, shutil\n"
        "mods = [m for m in ('pip', 'setuptools', 'wheel', 'ensurepip')"
        " if importlib.util.find_spec(m)]\n"
        "tools = [t for t in ('pip', 'pip3', 'gcc', 'cc', 'c++', 'make', 'ld')"
        " if shutil.which(t)]\n"
        "print(mods, tools)\n"
    )
    result = images.docker(
        "run",
        "--rm",
        "--network",
        "none",
        "--entrypoint",
        "python3",
        images.image(service),
        "-c",
        probe,
    )
    assert result.stdout.strip() == "[] []"


@pytest.mark.parametrize("service", SERVICES)
def test_size_above_the_base_image(images: Engine, service: str) -> None:
    base = images.inspect("image", images.base_image)["Size"]
    size = images.inspect("image", images.image(service))["Size"]
    above = (size - base) / MB
    print(f"{service}: {above:.1f} MB above the base")
    assert above <= BUDGET[service]


@pytest.mark.parametrize("service", sorted(SOCKET))
def test_read_only_root_without_a_socket_volume_is_one_line(images: Engine, service: str) -> None:
    result = images.docker(
        "run",
        "--rm",
        "--network",
        "none",
        "--read-only",
        "--user",
        "65532:65532",
        images.image(service),
        "--socket",
        SOCKET[service],
        timeout=120,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith(f"dracpu-{service}: error: cannot listen on {SOCKET[service]}: ")
    assert "not writable" in lines[-1] or "Read-only file system" in lines[-1]


@pytest.mark.parametrize("service", SERVICES)
def test_image_labels_carry_its_version(images: Engine, service: str) -> None:
    labels = images.inspect("image", images.image(service))["Config"]["Labels"]
    assert labels["org.opencontainers.image.version"] == images.tag
    assert labels["org.opencontainers.image.title"] == f"dracpu-{service}"
