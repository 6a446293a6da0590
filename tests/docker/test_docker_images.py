"""Every image, built offline on a real Docker engine, then run: its entry point answers, it
carries no package installer or compiler, it stays within its size budget, and without a
writable socket folder a service says so in one line."""

from __future__ import annotations

import pytest
from docker_engine import SERVICES, Engine

# The first test builds every image (minutes, cold); the stack takes a minute to start.
pytestmark = [pytest.mark.docker, pytest.mark.timeout(1800)]

MB = 1_000_000
# Size above the base image.
BUDGET = {"topology": 40, "allocator": 40, "nri-plugin": 40, "api": 40, "dra-plugin": 40}
# Each gRPC service given its default sockets on a read-only root with no volume: the first
# socket it would create, and what else it needs to get that far.
NO_SOCKET_VOLUME = {
    "topology": ("/run/dracpu/topology.sock", []),
    "allocator": ("/run/dracpu/allocator.sock", []),
    "nri-plugin": ("/run/dracpu/nri-plugin.sock", []),
    # The DRA endpoint in the kubelet's plugin folder comes first; a cluster folder on a
    # tmpfs stands in for the API server.
    "dra-plugin": (
        "/var/lib/kubelet/plugins/dra.cpu/dra.sock",
        ["--tmpfs", "/cluster", "{image}", "--cluster-dir", "/cluster"],
    ),
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


@pytest.mark.parametrize("service", sorted(NO_SOCKET_VOLUME))
def test_read_only_root_without_a_socket_volume_is_one_line(images: Engine, service: str) -> None:
    socket, extra = NO_SOCKET_VOLUME[service]
    image = images.image(service)
    tail = [arg.replace("{image}", image) for arg in extra] if extra else [image]
    result = images.docker(
        "run",
        "--rm",
        "--network",
        "none",
        "--read-only",
        "--user",
        "65532:65532",
        *tail,
        timeout=120,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"dracpu-{service}: error: cannot listen on {socket}: "), last
    assert "not writable" in last or "Read-only file system" in last, last


@pytest.mark.parametrize("service", SERVICES)
def test_image_labels_carry_its_version(images: Engine, service: str) -> None:
    labels = images.inspect("image", images.image(service))["Config"]["Labels"]
    assert labels["org.opencontainers.image.version"] == images.tag
    assert labels["org.opencontainers.image.title"] == f"dracpu-{service}"
