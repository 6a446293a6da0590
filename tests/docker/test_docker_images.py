"""Every image, built offline on a real Docker engine, then run: its entry point answers, it
carries no package installer or compiler, the five share every layer below their own few, the
shared part and each image's own stay within their size budgets, and without a writable socket
folder a service says so in one line."""

from __future__ import annotations

from pathlib import Path

import pytest
from harness.docker_engine import SERVICES, Engine

from dracpu.dev.apiserver.server import kubeconfig_text

# The first test builds every image (minutes, cold); the stack takes a minute to start.
pytestmark = [pytest.mark.docker, pytest.mark.timeout(1800)]

MB = 1_000_000
# The layers every image shares (the Dockerfile's runtime target, tagged by build-images.sh):
# the base's package installer removed, the dracpu user, the Python packages of all five
# services. On a node they are stored, and their files cached, once for all five images. The
# official kubernetes client (the dra-plugin's) and what it imports are about 28 MB of them.
SHARED_BUDGET = 70
# Each image's own layers above the shared ones: the core and its service, its folders, and the
# closing `--help` run; at most this many layers.
OWN_BUDGET = {"topology": 3, "allocator": 3, "nri-plugin": 3, "api": 3, "dra-plugin": 3}
OWN_LAYERS = 3
# Each gRPC service given its default sockets on a read-only root with no volume: the first
# socket it would create, and what else it needs to get that far.
NO_SOCKET_VOLUME = {
    "topology": ("/run/dracpu/topology.sock", []),
    "allocator": ("/run/dracpu/allocator.sock", []),
    "nri-plugin": ("/run/dracpu/nri-plugin.sock", []),
    # Its own socket's instance lock comes first, before the DRA endpoint in the kubelet's
    # plugin folder; it needs a kubeconfig to load (its server is never reached before the
    # socket is refused) and a /tmp to load it with (as under compose; without, that is the
    # one line).
    "dra-plugin": (
        "/run/dracpu/dra-plugin.sock",
        [
            "--tmpfs",
            "/tmp",
            "-v",
            "{kubeconfig}:/kubeconfig:ro",
            "{image}",
            "--kubeconfig",
            "/kubeconfig",
        ],
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


def layers(images: Engine, image: str) -> list[str]:
    found: list[str] = images.inspect("image", image)["RootFS"]["Layers"]
    return found


def test_the_five_images_share_every_layer_below_their_own(images: Engine) -> None:
    shared = layers(images, images.image("runtime"))
    base = layers(images, images.base_image)
    assert shared[: len(base)] == base
    assert len(shared) >= len(base) + 2  # the hardening layer and the Python packages
    for service in SERVICES:
        own = layers(images, images.image(service))
        assert own[: len(shared)] == shared, service
        assert 1 <= len(own) - len(shared) <= OWN_LAYERS, service
    # Any two of them: all but their top layers are the same.
    first, second = (layers(images, images.image(s)) for s in ("allocator", "api"))
    common = next(
        (i for i, pair in enumerate(zip(first, second, strict=False)) if pair[0] != pair[1]),
        min(len(first), len(second)),
    )
    assert common >= max(len(first), len(second)) - OWN_LAYERS
    assert first[:common] == second[:common] == shared


def test_size_of_the_shared_layers_above_the_base(images: Engine) -> None:
    base = images.inspect("image", images.base_image)["Size"]
    shared = images.inspect("image", images.image("runtime"))["Size"]
    above = (shared - base) / MB
    print(f"shared layers: {above:.1f} MB above the base, once for the five images")
    assert above <= SHARED_BUDGET


@pytest.mark.parametrize("service", SERVICES)
def test_size_of_each_images_own_layers(images: Engine, service: str) -> None:
    shared = images.inspect("image", images.image("runtime"))["Size"]
    size = images.inspect("image", images.image(service))["Size"]
    own = (size - shared) / MB
    print(f"{service}: {own:.2f} MB of its own above the shared layers")
    assert own <= OWN_BUDGET[service]


@pytest.mark.parametrize("service", sorted(NO_SOCKET_VOLUME))
def test_read_only_root_without_a_socket_volume_is_one_line(
    images: Engine, service: str, tmp_path: Path
) -> None:
    socket, extra = NO_SOCKET_VOLUME[service]
    image = images.image(service)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(kubeconfig_text("http://127.0.0.1:1"))
    kubeconfig.chmod(0o644)
    tail = [arg.replace("{image}", image).replace("{kubeconfig}", str(kubeconfig))
            for arg in extra] if extra else [image]  # fmt: skip
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
